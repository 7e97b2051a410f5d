#!/usr/bin/env bash
# Builds the control plane (kube-apiserver, kube-controller-manager, kube-scheduler), the node
# (kubelet, kube-proxy) and kubectl from the Go module proxy.
#
# `go install k8s.io/kubernetes/cmd/...` cannot work: k8s.io/kubernetes points its staging modules
# (k8s.io/api, client-go, ...) at ./staging through replace directives, which Go ignores in a
# dependency. So we generate a wrapper module that requires k8s.io/kubernetes and replaces every
# staging module with its published v0.Y.Z tag, derived from k8s.io/kubernetes's own go.mod.
STEP_NAME=kube
RERUN="stack/install/kube.sh"
source "$(dirname "$0")/lib.sh"

V="$KUBERNETES_VERSION"
DEST="$(cache_entry kube "v$V-$(go env GOVERSION)-$(recipe_hash "$0")")"

build() {
  local out=$1 wrap=$1/src minor staging
  minor=$(cut -d. -f2 <<<"$V")
  mkdir -p "$wrap" "$out/bin"
  log "resolving k8s.io/kubernetes@v$V from the Go module proxy"
  (cd "$wrap" && go mod init deltaflow.local/kubebuild >/dev/null 2>&1)
  local gomod
  gomod=$(cd "$wrap" && go mod download -json "k8s.io/kubernetes@v$V" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  [ -f "$gomod" ] || { log "could not download k8s.io/kubernetes@v$V"; return 1; }
  staging=$(sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p' "$gomod")
  {
    printf 'require k8s.io/kubernetes v%s\n' "$V"
    for m in $staging; do printf 'replace %s => %s v0.%s\n' "$m" "$m" "${V#1.}"; done
  } >>"$wrap/go.mod"
  log "wrapper module replaces $(wc -w <<<"$staging") staging modules with their v0.${V#1.} tags"
  local pkg=k8s.io/component-base/version cgo=k8s.io/client-go/pkg/version ld
  ld="-s -w"
  for p in $pkg $cgo; do
    ld+=" -X $p.gitVersion=v$V -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ld+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  log "downloading modules (cached in $GOMODCACHE)"
  (cd "$wrap" && GOFLAGS="$GOFLAGS -mod=mod" go mod download k8s.io/kubernetes) || return 1
  for cmd in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
    log "compiling $cmd (the first build takes several minutes on 2 cores)"
    (cd "$wrap" && CGO_ENABLED=0 GOFLAGS="$GOFLAGS -mod=mod" \
      go build -trimpath -ldflags "$ld" -o "$out/bin/$cmd" "k8s.io/kubernetes/cmd/$cmd") || return 1
  done
  "$out/bin/kube-apiserver" --version | grep -q "v$V" || { log "kube-apiserver reports the wrong version"; return 1; }
  rm -rf "$wrap"
}

if is_complete "$DEST"; then
  log "Kubernetes v$V binaries already built ($DEST)"
else
  log "building Kubernetes v$V binaries into $DEST"
  build_entry "$DEST" build
  log "built: $("$DEST/bin/kubectl" version --client 2>/dev/null | head -1)"
fi
echo "$DEST/bin"
