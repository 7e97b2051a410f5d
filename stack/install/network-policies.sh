#!/usr/bin/env bash
# Builds the local node's NetworkPolicy enforcer, sigs.k8s.io/kube-network-policies, from the Go
# module proxy: its controller package, patched (go/kube-network-policies/xt-nfqueue.patch), under
# a command of our own (go/kube-network-policies/main.go) that runs on the host like kube-proxy.
# The node's bridge CNI enforces no policy by itself.
#
# The patch: the controller sends a connection's first packets to userspace with nftables' queue
# statement, which needs the kernel's nft_queue (CONFIG_NFT_QUEUE); kernels without it (this
# machine's) refuse the rule. The same nfnetlink queue is reached through xtables' NFQUEUE target
# inside the nftables rule (nft_compat), which they do have. It also fixes a nil dereference
# of the NRI plugin when NRI is disabled.
STEP_NAME=network-policies
RERUN="stack/install/network-policies.sh"
source "$(dirname "$0")/lib.sh"

V="$KUBE_NETWORK_POLICIES_VERSION"
SRC="$INSTALL_DIR/go/kube-network-policies"
DEST="$(cache_entry network-policies "v$V-$(go env GOVERSION)-$(recipe_hash "$0" "$SRC/main.go" "$SRC/xt-nfqueue.patch")")"

build() {
  local out=$1 wrap=$1/src dir
  mkdir -p "$wrap" "$out/bin"
  log "resolving sigs.k8s.io/kube-network-policies@v$V from the Go module proxy"
  (cd "$wrap" && go mod init deltaflow.local/netpolbuild >/dev/null 2>&1)
  dir=$(cd "$wrap" && go mod download -json "sigs.k8s.io/kube-network-policies@v$V" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  [ -d "$dir" ] || { log "could not download sigs.k8s.io/kube-network-policies@v$V"; return 1; }
  # The module cache is read-only: patch a copy, which the wrapper module builds instead.
  cp -r "$dir" "$wrap/kube-network-policies"
  chmod -R u+w "$wrap/kube-network-policies"
  log "applying xt-nfqueue.patch"
  patch -d "$wrap/kube-network-policies" -p1 --quiet --no-backup-if-mismatch <"$SRC/xt-nfqueue.patch" ||
    { log "xt-nfqueue.patch does not apply to v$V"; return 1; }
  cp "$SRC/main.go" "$wrap/"
  (cd "$wrap" &&
    go mod edit -require "sigs.k8s.io/kube-network-policies@v$V" \
      -replace "sigs.k8s.io/kube-network-policies=./kube-network-policies" &&
    log "downloading modules (cached in $GOMODCACHE)" &&
    go mod tidy >&2) || { log "could not resolve the modules"; return 1; }
  log "compiling kube-network-policies"
  (cd "$wrap" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/bin/kube-network-policies" .) ||
    return 1
  "$out/bin/kube-network-policies" -help 2>&1 | grep -q -- "-kubeconfig" ||
    { log "the built command does not run"; return 1; }
  rm -rf "$wrap"
}

if is_complete "$DEST"; then
  log "kube-network-policies v$V already built ($DEST)"
else
  log "building kube-network-policies v$V into $DEST"
  build_entry "$DEST" build
fi
echo "$DEST/bin"
