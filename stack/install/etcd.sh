#!/usr/bin/env bash
# Builds etcd from the Go module proxy through a wrapper main (go/etcd/main.go). Debian's etcd is
# older than Kubernetes supports, and etcd publishes no other artifact on the registries we reach.
STEP_NAME=etcd
RERUN="stack/install/etcd.sh"
source "$(dirname "$0")/lib.sh"

DEST="$(cache_entry etcd "v$ETCD_VERSION-$(go env GOVERSION)-$(recipe_hash "$0" "$INSTALL_DIR/go/etcd/main.go")")"

build() {
  local out=$1 wrap=$1/src
  mkdir -p "$wrap" "$out/bin"
  cp "$INSTALL_DIR/go/etcd/main.go" "$wrap/"
  (cd "$wrap" && go mod init deltaflow.local/etcdbuild >/dev/null 2>&1 &&
    log "resolving go.etcd.io/etcd/server/v3@v$ETCD_VERSION" &&
    go get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION" >/dev/null 2>&1 && go mod tidy >/dev/null 2>&1) ||
    { log "could not resolve go.etcd.io/etcd/server/v3@v$ETCD_VERSION"; return 1; }
  log "compiling etcd"
  (cd "$wrap" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/bin/etcd" .) || return 1
  "$out/bin/etcd" --version | grep -q "$ETCD_VERSION" || { log "etcd reports the wrong version"; return 1; }
  rm -rf "$wrap"
}

if is_complete "$DEST"; then
  log "etcd v$ETCD_VERSION already built ($DEST)"
else
  log "building etcd v$ETCD_VERSION into $DEST"
  build_entry "$DEST" build
fi
echo "$DEST/bin"
