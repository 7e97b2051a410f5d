"""What a stopped stack must not leave on the machine: mounts, namespaces, links, rules, shims,
the object store's process.

``python -m devstack.leftovers`` prints each leftover and exits 1 if there is any; the test
command runs it after pytest, next to its check of the pids the stack started.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from devstack.network import BRIDGE
from devstack.node import NETNS_DIR


def leftovers() -> list[str]:
    """Everything of the node still on the machine, one line each (empty: all clean)."""
    found: list[str] = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4]
        container = "/containerd/" in point and ("/rootfs" in point or "/shm" in point)
        if container or "/kubelet/pods/" in point or point.startswith(f"{NETNS_DIR}/cni-"):
            found.append(f"mount {point}")
    if NETNS_DIR.exists():
        found += [f"network namespace {n}" for n in os.listdir(NETNS_DIR) if n.startswith("cni-")]
    # What the kubelet, containerd and libcni write outside their configured roots.
    found += [f"file {p}" for p in Path("/var/lib/cni/results").glob("deltaflow-*")]
    found += [f"socket {p}" for p in Path("/var/lib/kubelet/device-plugins").glob("kubelet.sock")]
    found += [
        f"dangling log link {p}"
        for p in Path("/var/log/containers").glob("*.log")
        if p.is_symlink() and not p.exists()
    ]
    link = subprocess.run(["ip", "link", "show", BRIDGE], capture_output=True, check=False)
    if link.returncode == 0:
        found.append(f"network interface {BRIDGE}")
    for tool in ("iptables-save", "ip6tables-save"):
        rules = subprocess.run([tool], capture_output=True, text=True, check=False).stdout
        chains = {
            line.split()[0][1:]
            for line in rules.splitlines()
            if line.startswith(":") and line[1:].startswith(("KUBE-", "CNI-"))
        }
        found += [f"{tool.split('-')[0]} chain {c}" for c in sorted(chains)]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv0 = (entry / "cmdline").read_bytes().split(b"\0")[0]
            except OSError:
                continue
            ours = argv0.endswith((b"containerd-shim-runc-v2", b"kubelet", b"kube-proxy"))
            # The stack's object store (stack/install/minio.sh builds it into the cache).
            ours = ours or (argv0.endswith(b"/minio") and b"/minio/" in argv0)
            if ours:
                found.append(f"process {entry.name} {argv0.decode(errors='replace')}")
    return found


def main() -> int:
    """Print the leftovers; exit 1 if there are any."""
    found = leftovers()
    for item in found:
        print(f"left behind: {item}")
    if not found:
        print(
            "no mount, network namespace, interface, iptables chain or shim of the node, and no "
            "object store, is left"
        )
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
