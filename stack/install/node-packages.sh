#!/usr/bin/env bash
# Installs what the local Kubernetes node and the image build need from Debian's packages:
# containerd, runc and the CNI plugins (the node's container runtime), docker.io (dockerd builds
# the project's image from its Dockerfile), debootstrap (base images without a registry),
# iptables/conntrack (kube-proxy), nftables (nft: the node checks and removes the NetworkPolicy
# enforcer's table), gcc's static libc (the pause image). Root only; a no-op once
# every package is present.
STEP_NAME=node-packages
RERUN="stack/install/node-packages.sh"
source "$(dirname "$0")/lib.sh"

PACKAGES=(containerd runc containernetworking-plugins docker.io debootstrap iptables conntrack
  nftables iproute2 socat kmod libc6-dev gcc ca-certificates)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
  log "Debian packages already installed: ${PACKAGES[*]}"
else
  [ "$(id -u)" -eq 0 ] || die "installing ${missing[*]} needs root (apt-get)"
  log "apt-get update"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 || die "apt-get update failed"
  log "apt-get install ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 ||
    die "apt-get install ${missing[*]} failed"
  log "installed ${missing[*]}"
fi
# The packages' own services are never used: the stack starts containerd and dockerd by hand with
# private roots and sockets. Nothing here starts them (there is no systemd on these machines).
for bin in containerd containerd-shim-runc-v2 runc dockerd docker debootstrap iptables-save nft; do
  command -v "$bin" >/dev/null || die "$bin is missing after the install"
done
[ -x /usr/lib/cni/bridge ] || die "CNI plugins missing in /usr/lib/cni"
echo /usr/lib/cni
