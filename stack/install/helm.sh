#!/usr/bin/env bash
# Builds helm from the Go module proxy (helm.sh/helm/v3 installs cleanly with `go install`).
STEP_NAME=helm
RERUN="stack/install/helm.sh"
source "$(dirname "$0")/lib.sh"

DEST="$(cache_entry helm "v$HELM_VERSION-$(go env GOVERSION)-$(recipe_hash "$0")")"

build() {
  local out=$1 p=helm.sh/helm/v3/internal/version gomod minor ld
  mkdir -p "$out/bin"
  gomod=$(cd "$out" && go mod download -json "helm.sh/helm/v3@v$HELM_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  [ -f "$gomod" ] || { log "could not download helm.sh/helm/v3@v$HELM_VERSION"; return 1; }
  # Like helm's Makefile: the version and the Kubernetes version it was built against come from
  # ldflags; without them `helm version` says v3.x-dev and offline rendering assumes Kubernetes 1.20.
  minor=$(sed -n 's#^[[:space:]]*k8s.io/client-go v0\.\([0-9]*\)\..*#\1#p' "$gomod")
  ld="-s -w -X $p.version=v$HELM_VERSION -X $p.gitTreeState=clean"
  for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
    ld+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$minor"
  done
  log "compiling helm.sh/helm/v3/cmd/helm@v$HELM_VERSION (Kubernetes 1.$minor capabilities)"
  CGO_ENABLED=0 GOBIN="$out/bin" go install -trimpath -ldflags "$ld" \
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
