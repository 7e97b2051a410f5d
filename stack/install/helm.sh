#!/usr/bin/env bash
# Builds helm from the Go module proxy (helm.sh/helm/v3 installs cleanly with `go install`).
STEP_NAME=helm
RERUN="stack/install/helm.sh"
source "$(dirname "$0")/lib.sh"

DEST="$(cache_entry helm "v$HELM_VERSION-$(go env GOVERSION)-$(recipe_hash "$0")")"

build() {
  local out=$1 p=helm.sh/helm/v3/internal/version
  mkdir -p "$out/bin"
  log "compiling helm.sh/helm/v3/cmd/helm@v$HELM_VERSION"
  # helm reads its version from ldflags too; without it `helm version` says v3.x-dev.
  CGO_ENABLED=0 GOBIN="$out/bin" go install -trimpath \
    -ldflags "-s -w -X $p.version=v$HELM_VERSION -X $p.gitTreeState=clean" \
    "helm.sh/helm/v3/cmd/helm@v$HELM_VERSION" || return 1
  "$out/bin/helm" version --short | grep -q "v$HELM_VERSION" || { log "helm reports the wrong version"; return 1; }
}

if is_complete "$DEST"; then
  log "helm v$HELM_VERSION already built ($DEST)"
else
  log "building helm v$HELM_VERSION into $DEST"
  build_entry "$DEST" build
fi
echo "$DEST/bin"
