#!/usr/bin/env bash
# Installs every part of the local stack, in dependency order. Idempotent: a warm cache makes this
# a few seconds; each step prints what it does and how long it took.
STEP_NAME=install
RERUN="stack/install/all.sh"
source "$(dirname "$0")/lib.sh"

# node-packages and image need root: Debian's containerd/dockerd/debootstrap, then the project's
# image built from its Dockerfile (stack/install/image.sh), which the local node runs.
for step in python spark-jars jvm-archive kafka etcd helm minio s3proxy kube network-policies node-packages image; do
  t=$SECONDS
  bash "$INSTALL_DIR/$step.sh" >/dev/null || die "step '$step' failed; rerun it alone with: bash stack/install/$step.sh"
  log "$step ready in $((SECONDS - t))s"
done
log "local stack installed in ${SECONDS}s (cache: $DELTAFLOW_CACHE)"
