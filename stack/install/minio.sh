#!/usr/bin/env bash
# Builds MinIO (the S3-compatible server the object-storage tests write to) from the Go module
# proxy. MinIO publishes its community edition as source only; the proxy serves one pseudo-version
# of it (its RELEASE tags are not semver), pinned in versions.env. See docs/plans/object-storage.md.
STEP_NAME=minio
RERUN="stack/install/minio.sh"
source "$(dirname "$0")/lib.sh"

DEST="$(cache_entry minio "$MINIO_VERSION-$(go env GOVERSION)-$(recipe_hash "$0")")"
COMMIT="${MINIO_VERSION##*-}"

build() {
  local out=$1
  mkdir -p "$out/bin"
  log "compiling github.com/minio/minio@$MINIO_VERSION (a few minutes cold)"
  GOBIN="$out/bin" CGO_ENABLED=0 go install -trimpath \
    -ldflags "-s -w -X github.com/minio/minio/cmd.CommitID=$COMMIT -X github.com/minio/minio/cmd.ShortCommitID=$COMMIT" \
    "github.com/minio/minio@$MINIO_VERSION" || return 1
  "$out/bin/minio" --version | grep -q "$COMMIT" || { log "minio reports the wrong version"; return 1; }
}

if is_complete "$DEST"; then
  log "MinIO $MINIO_VERSION already built ($DEST)"
else
  log "building MinIO $MINIO_VERSION into $DEST"
  build_entry "$DEST" build
fi
echo "$DEST/bin"
