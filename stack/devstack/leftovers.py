"""What a stopped stack must not leave on the machine, and how an interrupted run's orphans go.

A node that stops cleanly takes away everything it made (devstack.node). A run that is killed
(SIGKILL, a machine restart mid-run) cannot: its mounts, network namespaces, pod veths, iptables
chains, the policy enforcer's nftables table, shims and fixed-path files stay.
:func:`leftovers` lists them; :func:`sweep_leftovers` removes them, and the node runs it under
its lock before it starts, so one interrupted run does not fail every run after it.

``python -m devstack.leftovers`` prints each leftover and exits 1 if there is any (the test
command runs it after pytest, next to its check of the pids the stack started);
``--sweep`` removes them first.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from devstack.network import BRIDGE, NETNS_DIR, remove_bridge

LOCK_FILE = Path("/run/lock/deltaflow-node.lock")
CNI_RESULTS = Path("/var/lib/cni/results")
KUBELET_SOCKET = Path("/var/lib/kubelet/device-plugins/kubelet.sock")
CONTAINER_LOGS = Path("/var/log/containers")
# A node's work directory, `<work>/deltaflow-node` (tests, the demo and the benchmarks alike):
# every process of a node names it on its command line, and its mounts live under it.
NODE_DIR_NAME = "deltaflow-node"
NODE_WORK_MARK = f"/{NODE_DIR_NAME}/".encode()
CHAIN_PREFIXES = ("KUBE-", "CNI-")
# The NetworkPolicy enforcer's nftables table (inet family): left behind, its rule keeps sending
# the pods' new connections to a queue no one reads, which drops them.
NFT_TABLE = "kube-network-policies"


class NodeLockError(RuntimeError):
    """Another Deltaflow node holds the machine."""


@dataclass(frozen=True)
class Leftover:
    """One thing of a node still on the machine."""

    kind: str  # mount, network namespace, file, socket, dangling log link, interface, chain, ...
    target: str

    def __str__(self) -> str:
        return f"{self.kind} {self.target}"


def take_node_lock() -> IO[str]:
    """Hold the machine-wide node lock (kube-proxy's chains are global: one node at a time)."""
    LOCK_FILE.parent.mkdir(parents=True, exist_ok=True)
    lock = LOCK_FILE.open("a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        owner = lock.read().strip()
        lock.close()
        raise NodeLockError(
            f"another Deltaflow node is running on this machine ({owner}); one node at a time "
            "(kube-proxy's iptables chains are machine-wide): stop it first"
        ) from None
    lock.truncate(0)
    lock.write(f"pid {os.getpid()}\n")
    lock.flush()
    return lock


def mountpoints() -> list[str]:
    """Every mount point on the machine, as /proc/self/mountinfo lists them."""
    return [
        line.split()[4].replace("\\040", " ")
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
    ]


def node_mounts(points: list[str]) -> list[str]:
    """The mount points, of ``points``, that a Deltaflow node made (wherever its work folder)."""
    found = []
    for point in points:
        container = "/containerd/" in point and ("/rootfs" in point or "/shm" in point)
        # The kubelet bind-mounts its root dir; containerd keeps the pods' netns mounts there.
        in_node = NODE_WORK_MARK.decode() in point + "/"
        netns = point.startswith(f"{NETNS_DIR}/cni-")
        if container or in_node or netns or "/kubelet/pods/" in point:
            found.append(point)
    return found


def _chains(tool: str) -> list[str]:
    rules = subprocess.run([f"{tool}-save"], capture_output=True, text=True, check=False).stdout
    return sorted(
        {
            line.split()[0][1:]
            for line in rules.splitlines()
            if line.startswith(":") and line[1:].startswith(CHAIN_PREFIXES)
        }
    )


def _nft_table() -> bool:
    """Whether the enforcer's nftables table exists (no nft command: no table was ever made)."""
    try:
        listed = subprocess.run(
            ["nft", "list", "table", "inet", NFT_TABLE], capture_output=True, check=False
        )
    except FileNotFoundError:
        return False
    return listed.returncode == 0


def processes() -> list[tuple[int, list[bytes]]]:
    """(pid, argv) of every process on the machine (one that exits meanwhile is left out)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                found.append((int(entry.name), (entry / "cmdline").read_bytes().split(b"\0")))
            except OSError:
                continue
    return found


# The control plane's binaries as stack/install builds them into the cache (.../bin/<name>).
CONTROL_PLANE = (b"/bin/etcd", b"/bin/kube-apiserver", b"/bin/kube-controller-manager",
                 b"/bin/kube-scheduler")  # fmt: skip


def _control_plane(argv: list[bytes]) -> bool:
    """A control-plane process the stack started (its binary is in the stack's cache)."""
    return argv[0].endswith(CONTROL_PLANE) and b"/deltaflow/" in argv[0]


def _processes() -> list[tuple[int, list[bytes]]]:
    """(pid, argv) of every node, control-plane or object-store process (the stack's or
    anyone's)."""
    found = []
    for pid, argv in processes():
        ours = argv[0].endswith(
            (b"containerd-shim-runc-v2", b"kubelet", b"kube-proxy", b"/kube-network-policies")
        )
        # The node's containerd (its config is in the node work dir), and the control plane:
        # a run killed before its teardown leaves them serving (seen: two such runs' apiservers).
        ours = ours or (argv[0].endswith(b"containerd") and any(NODE_WORK_MARK in a for a in argv))
        ours = ours or _control_plane(argv)
        # The stack's object store (stack/install/minio.sh builds it into the cache).
        ours = ours or (argv[0].endswith(b"/minio") and b"/minio/" in argv[0])
        if ours:
            found.append((pid, argv))
    return found


def leftovers() -> list[Leftover]:
    """Everything of a node still on the machine (empty: all clean)."""
    found = [Leftover("mount", p) for p in node_mounts(mountpoints())]
    if NETNS_DIR.exists():
        found += [
            Leftover("network namespace", n) for n in os.listdir(NETNS_DIR) if n.startswith("cni-")
        ]
    # What the kubelet, containerd and libcni write outside their configured roots.
    found += [Leftover("file", str(p)) for p in CNI_RESULTS.glob("deltaflow-*")]
    if KUBELET_SOCKET.exists():
        found.append(Leftover("socket", str(KUBELET_SOCKET)))
    found += [
        Leftover("dangling log link", str(p))
        for p in CONTAINER_LOGS.glob("*.log")
        if p.is_symlink() and not p.exists()
    ]
    link = subprocess.run(["ip", "link", "show", BRIDGE], capture_output=True, check=False)
    if link.returncode == 0:
        found.append(Leftover("network interface", BRIDGE))
    for tool in ("iptables", "ip6tables"):
        found += [Leftover(f"{tool} chain", c) for c in _chains(tool)]
    if _nft_table():
        found.append(Leftover("nftables table", f"inet {NFT_TABLE}"))
    found += [
        Leftover("process", f"{pid} {argv[0].decode(errors='replace')}")
        for pid, argv in _processes()
    ]
    return found


def _kill_orphans(*, object_store: bool) -> None:
    """SIGKILL the processes of a dead node (they name a node work dir), and, with
    ``object_store`` (no stack of the caller's runs yet), a stray MinIO and control plane."""
    for _ in range(3):
        orphans = [
            pid
            for pid, argv in _processes()
            if any(NODE_WORK_MARK in arg for arg in argv)
            or (object_store and (argv[0].endswith(b"/minio") or _control_plane(argv)))
        ]
        if not orphans:
            return
        for pid in orphans:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)  # shims and their containers go before their mounts can


def _drop_chains(tool: str) -> None:
    """Restore the rules without any KUBE-/CNI- chain or rule that jumps to one."""
    saved = subprocess.run([f"{tool}-save"], capture_output=True, text=True, check=False).stdout
    kept = [line for line in saved.splitlines() if not any(p in line for p in CHAIN_PREFIXES)]
    restore = "\n".join(kept) + "\n"
    subprocess.run([f"{tool}-restore"], input=restore, text=True, capture_output=True, check=False)


def _unmount(points: list[str]) -> None:
    """Lazily unmount ``points``, the deepest first (a child before its parent)."""
    for point in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def empty_work_folder(out: Path) -> None:
    """Empty (or create) a command's work folder. A run killed mid-way leaves its node's mounts
    in it (kubelet, pods' network namespaces), which would make the removal fail half-way:
    they are unmounted first. Call when no node runs (the node lock is free)."""
    _unmount([p for p in mountpoints() if p.startswith(f"{out}/")])
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)


def sweep_leftovers(*, stack_started: bool = False) -> list[Leftover]:
    """Remove what :func:`leftovers` finds; return what was there. Call with the node lock held.

    ``stack_started``: the caller's stack already made its bridge and may run its object store
    (a node starts after both): those two are left alone, only a dead node's things go.
    A kubelet, kube-proxy or shim that does not belong to a Deltaflow node work dir is left
    running (and still reported by :func:`leftovers`): it is someone else's.
    """
    found = [
        item
        for item in leftovers()
        if not (
            stack_started
            and (
                item.kind == "network interface"
                or "/minio" in item.target
                or item.target.endswith(tuple(b.decode() for b in CONTROL_PLANE))
            )
        )
    ]
    if not found:
        return []
    _kill_orphans(object_store=not stack_started)
    for _ in range(3):  # a lazy unmount of a parent can leave a child listed once more
        _unmount(node_mounts(mountpoints()))
    for item in found:
        path = Path(item.target)
        if item.kind == "network namespace":
            with contextlib.suppress(OSError):
                (NETNS_DIR / item.target).unlink()
        elif item.kind in ("file", "socket", "dangling log link"):
            with contextlib.suppress(OSError):
                path.unlink()
            # libcni's loopback result of the same sandbox: cni-loopback-<id>-lo.
            if item.kind == "file":
                sandbox = path.name.removeprefix("deltaflow-").rsplit("-", 1)[0]
                with contextlib.suppress(OSError):
                    (CNI_RESULTS / f"cni-loopback-{sandbox}-lo").unlink()
    if not stack_started:
        remove_bridge()
    for tool in ("iptables", "ip6tables"):
        if _chains(tool):
            _drop_chains(tool)
    if _nft_table():
        subprocess.run(
            ["nft", "delete", "table", "inet", NFT_TABLE], capture_output=True, check=False
        )
    return found


def main(argv: list[str]) -> int:
    """Print the leftovers (after removing them with ``--sweep``); exit 1 if any remain."""
    if "--sweep" in argv:
        try:
            lock = take_node_lock()
        except NodeLockError as err:
            print(err)
            return 1
        try:
            for item in sweep_leftovers():
                print(f"removed: {item}")
        finally:
            lock.close()
    found = leftovers()
    for item in found:
        print(f"left behind: {item}")
    if not found:
        print(
            "no mount, network namespace, interface, iptables chain, nftables table or shim of "
            "the node, and no object store, is left"
        )
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
