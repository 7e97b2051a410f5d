"""The pod network of the local node: one Linux bridge that never routes off the machine.

Pods get addresses on a bridge the stack creates itself; the host side of the bridge (the
gateway) is where the pods reach the API server and Kafka. IP forwarding stays off and no
masquerade rule exists, so a pod can talk to the host and to other pods, and to nothing else:
no packet of the stack leaves the machine. Everything here is undone by :func:`remove_bridge`.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

BRIDGE = "dflow0"
POD_CIDR = "10.244.0.0/24"
GATEWAY = "10.244.0.1"  # the host on the pod network: API server, kubelet, Kafka bind here
SERVICE_CIDR = "10.0.0.0/24"
KUBERNETES_SERVICE_IP = "10.0.0.1"  # first address of SERVICE_CIDR
NETNS_DIR = Path("/run/netns")  # where libcni and `ip netns` keep named network namespaces


class NetworkError(RuntimeError):
    """The bridge could not be created or removed."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise NetworkError(f"ip {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc


def bridge_exists() -> bool:
    """Whether the pod bridge is there (left by a run that did not clean up, or ours)."""
    return _ip("link", "show", BRIDGE, check=False).returncode == 0


@dataclass
class PodNetwork:
    """The bridge and its gateway address, as the stack's services need them."""

    bridge: str = BRIDGE
    gateway: str = GATEWAY
    pod_cidr: str = POD_CIDR
    service_cidr: str = SERVICE_CIDR


def create_bridge() -> PodNetwork:
    """Create the bridge with the gateway address, up; replaces one a crashed run left behind."""
    if bridge_exists():
        remove_bridge()
    _ip("link", "add", BRIDGE, "type", "bridge")
    _ip("addr", "add", f"{GATEWAY}/{POD_CIDR.split('/')[1]}", "dev", BRIDGE)
    _ip("link", "set", BRIDGE, "up")
    return PodNetwork()


def remove_bridge() -> None:
    """Delete the veth ends attached to the bridge, then the bridge itself."""
    if not bridge_exists():
        return
    ports = _ip("-o", "link", "show", "master", BRIDGE, check=False).stdout
    for line in ports.splitlines():
        # "7: veth1234@if2: <...>" -> veth1234
        name = line.split(":", 2)[1].strip().split("@")[0]
        _ip("link", "delete", name, check=False)
    _ip("link", "delete", BRIDGE)
