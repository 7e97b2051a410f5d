"""A real Kubernetes node on this machine: containerd + runc + CNI, kubelet, kube-proxy, and
kube-network-policies, which enforces NetworkPolicies (the bridge CNI does not).

Everything the node makes lives under its work directory (containerd root and state, kubelet
root, pod logs, CNI state) or is recorded before it is made (network namespaces, iptables rules,
the sysctls the kubelet sets), and :meth:`Node.stop` takes all of it away again: container
processes, mounts, network namespaces (and with them the pods' veths), iptables chains, the
policy enforcer's nftables table, cgroups. The bridge belongs to devstack.network, which creates
and removes it. Only one node can run on a machine at a time (kube-proxy's iptables chains are
global): a lock file says so.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from devstack.install import installed_path
from devstack.kube import KubeControlPlane, write_kubeconfig
from devstack.leftovers import (
    NFT_TABLE,
    NodeLockError,
    mountpoints,
    processes,
    sweep_leftovers,
    take_node_lock,
)
from devstack.network import NETNS_DIR, PodNetwork
from devstack.process import Service, ServiceError, free_port, record_pid, tail

NODE_NAME = "deltaflow-node"
CNI_BIN_DIR = "/usr/lib/cni"
# The kubelet sets some of these unless told not to; all are put back when the node stops.
KUBELET_SYSCTLS = (
    "vm/overcommit_memory",
    "kernel/panic",
    "kernel/panic_on_oops",
    "net/ipv4/ip_forward",  # nothing of the node should turn it on; put back if anything did
)
CGROUP_ROOT = Path("/sys/fs/cgroup")
# Host folders the kubelet, containerd and libcni write to whatever their configured roots: the
# device-plugin socket, CNI result caches, container-log symlinks, shim sockets and fifos. What
# the node adds under them is removed when it stops; what was there before is left alone.
FIXED_HOST_PATHS = (
    Path("/var/lib/kubelet"),
    Path("/var/lib/cni"),
    Path("/var/log/containers"),
    Path("/run/containerd"),
)


def _run(*argv: str, check: bool = True, stdin: bytes | None = None) -> str:
    proc = subprocess.run(argv, input=stdin, capture_output=True, check=False)
    if check and proc.returncode != 0:
        raise ServiceError(
            f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.decode(errors='replace')}"
        )
    return proc.stdout.decode(errors="replace")


def _containerd_config(work: Path, pause_image: str) -> str:
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""\
version = 2
root = "{work}/containerd/root"
state = "{work}/containerd/state"
[grpc]
  address = "{work}/containerd.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "{work}/containerd/opt"
[{cri}]
  sandbox_image = "{pause_image}"
  # Without this every sandbox fails here: runc cannot write a negative oom_score_adj (the
  # machine lacks CAP_SYS_RESOURCE), "can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
  enable_selinux = false
  # Network namespaces under our state dir, not /run/netns: all the node makes stays in one place.
  netns_mounts_under_state_dir = true
[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
  Root = "{work}/containerd/runc"
[{cri}.cni]
  bin_dir = "{CNI_BIN_DIR}"
  conf_dir = "{work}/cni/net.d"
"""


def _cni_config(work: Path, net: PodNetwork) -> dict[str, Any]:
    return {
        "cniVersion": "0.4.0",
        "name": "deltaflow",
        "plugins": [
            {
                "type": "bridge",
                "bridge": net.bridge,
                # No default route, no masquerade, and IP forwarding stays off (isGateway would
                # turn it on): pods reach the host (on the bridge) and each other, and Services
                # through the one route below, never anything beyond the machine.
                "isGateway": False,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": net.pod_cidr, "gateway": net.gateway}]],
                    "routes": [{"dst": net.service_cidr, "gw": net.gateway}],
                    "dataDir": str(work / "cni" / "ipam"),
                },
            }
        ],
    }


def _kubelet_config(work: Path, plane: KubeControlPlane, net: PodNetwork) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,  # this machine has cgroup v1 only
        "cgroupDriver": "cgroupfs",  # no systemd here
        "containerRuntimeEndpoint": f"unix://{work}/containerd.sock",
        "address": net.gateway,
        "port": free_port(),
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": free_port(),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(plane.ca_file)},
        },
        "authorization": {"mode": "AlwaysAllow"},  # only the API server holds a client cert
        "tlsCertFile": str(plane.work_dir / "pki" / "kubelet.crt"),
        "tlsPrivateKeyFile": str(plane.work_dir / "pki" / "kubelet.key"),
        "podCIDR": net.pod_cidr,
        "maxPods": 40,
        "serializeImagePulls": False,
        "podLogsDir": str(work / "pod-logs"),
        "volumePluginDir": str(work / "volume-plugins"),
        # Local images only, none can be pulled again: never garbage-collect them, and never
        # evict pods for disk or memory a test machine is short of.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "50Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "protectKernelDefaults": False,
        "nodeStatusUpdateFrequency": "5s",
        "syncFrequency": "10s",
        "fileCheckFrequency": "5s",
        "shutdownGracePeriod": "0s",
        "resolvConf": "/etc/resolv.conf",
    }


def _kube_proxy_config(work: Path, kubeconfig: Path, net: PodNetwork) -> dict[str, Any]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "mode": "iptables",  # no IPVS on this machine
        "hostnameOverride": NODE_NAME,
        "clusterCIDR": net.pod_cidr,
        "bindAddress": net.gateway,
        "healthzBindAddress": f"127.0.0.1:{free_port()}",
        "metricsBindAddress": f"127.0.0.1:{free_port()}",
        # Leave the machine's conntrack settings alone (kube-proxy would otherwise raise them).
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
        "iptables": {"localhostNodePorts": False, "masqueradeAll": False},
        "nodePortAddresses": [f"{net.gateway}/32"],
    }


BUILTIN_CHAINS = {
    "filter": ("INPUT", "FORWARD", "OUTPUT"),
    "nat": ("PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"),
    "mangle": ("PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"),
    "raw": ("PREROUTING", "OUTPUT"),
    "security": ("INPUT", "FORWARD", "OUTPUT"),
}


def _tables(save_output: str) -> dict[str, str]:
    """iptables-save output split into its tables: name -> "*name ... COMMIT" text."""
    tables: dict[str, str] = {}
    current: list[str] = []
    for line in save_output.splitlines():
        if line.startswith("*"):
            current = [line]
        elif current:
            current.append(line)
            if line == "COMMIT":
                tables[current[0][1:]] = "\n".join(current) + "\n"
                current = []
    return tables


def _tables_as_before(before: str, now: str) -> str:
    """An iptables-restore input that sets every table present now back to ``before``.

    A table that did not exist before is restored empty (built-in chains, ACCEPT): restoring a
    table replaces its rules and deletes its other chains, the ones kube-proxy and CNI made.
    """
    old = _tables(before)
    parts = []
    for table in _tables(now):
        if table in old:
            parts.append(old[table])
        else:
            chains = "".join(f":{c} ACCEPT [0:0]\n" for c in BUILTIN_CHAINS.get(table, ()))
            parts.append(f"*{table}\n{chains}COMMIT\n")
    return "".join(parts)


@dataclass
class HostSnapshot:
    """What the node changes on the host that it cannot keep under its own directory."""

    iptables: dict[str, str]
    sysctls: dict[str, str]
    netns: set[str]
    host_paths: set[Path]
    host_roots: tuple[Path, ...] = FIXED_HOST_PATHS

    @classmethod
    def take(cls) -> HostSnapshot:
        """Record iptables rules, the kubelet's sysctls, the existing network namespaces and what
        exists under the fixed host folders."""
        rules = {tool: _run(f"{tool}-save") for tool in ("iptables", "ip6tables")}
        sysctls = {k: Path("/proc/sys", k).read_text().strip() for k in KUBELET_SYSCTLS}
        netns = set(os.listdir(NETNS_DIR)) if NETNS_DIR.exists() else set()
        return cls(rules, sysctls, netns, _existing(FIXED_HOST_PATHS))

    def remove_new_host_paths(self) -> None:
        """Delete what appeared under the fixed host folders since the snapshot, deepest first."""
        new = _existing(self.host_roots) - self.host_paths
        for path in sorted(new, key=lambda p: -len(p.parts)):
            with contextlib.suppress(OSError):
                if path.is_dir() and not path.is_symlink():
                    path.rmdir()
                else:
                    path.unlink()

    def restore(self) -> None:
        """Put iptables rules and sysctls back as they were."""
        for tool, before in self.iptables.items():
            restore = _tables_as_before(before, _run(f"{tool}-save", check=False))
            if restore:
                _run(f"{tool}-restore", stdin=restore.encode(), check=False)
        for key, value in self.sysctls.items():
            with contextlib.suppress(OSError):
                Path("/proc/sys", key).write_text(value)


@dataclass
class Node:
    """A running node: its services, its work directory and how to undo everything it did."""

    name: str
    work_dir: Path
    snapshot: HostSnapshot
    lock: IO[str]
    services: list[Service] = field(default_factory=list)

    @property
    def containerd_socket(self) -> Path:
        """containerd's CRI and API socket."""
        return self.work_dir / "containerd.sock"

    def ctr(self, *args: str, stdin: bytes | None = None) -> str:
        """Run ``ctr`` against this node's containerd, in the kubelet's namespace."""
        return _run("ctr", "-a", str(self.containerd_socket), "-n", "k8s.io", *args, stdin=stdin)

    def import_image(self, tarball: Path) -> None:
        """Load a docker-save/OCI archive into the kubelet's image store."""
        self.ctr("images", "import", "--all-platforms", str(tarball))

    def stop(self) -> None:
        """Stop the node and remove every process, mount, namespace, link and rule it made."""
        by_name = {s.name: s for s in self.services}
        for name in (NETWORK_POLICIES, "kube-proxy", "kubelet"):
            if name in by_name:
                by_name[name].stop()
        if NETWORK_POLICIES in by_name:
            # It deletes its table when it stops; one killed before it could would keep dropping
            # every new connection of a pod a policy selects.
            _run(by_name[NETWORK_POLICIES].argv[0], "-cleanup", check=False)
        _kill_containers(self.work_dir)
        if "containerd" in by_name:
            by_name["containerd"].stop()
        _unmount_under(self.work_dir)
        for ns in _new_netns(self.snapshot.netns):
            with contextlib.suppress(OSError):
                _run("umount", "-l", str(NETNS_DIR / ns), check=False)
                (NETNS_DIR / ns).unlink()
        _remove_cgroups()
        self.snapshot.remove_new_host_paths()
        self.snapshot.restore()
        with contextlib.suppress(OSError):
            fcntl.flock(self.lock, fcntl.LOCK_UN)
            self.lock.close()


def _existing(roots: tuple[Path, ...]) -> set[Path]:
    """Every path under ``roots`` (the roots included), without following symlinks."""
    found: set[Path] = set()
    for root in roots:
        if root.exists() or root.is_symlink():
            found.add(root)
            for folder, dirs, files in os.walk(root):
                found.update(Path(folder, name) for name in (*dirs, *files))
    return found


def _new_netns(before: set[str]) -> list[str]:
    if not NETNS_DIR.exists():
        return []
    return [n for n in os.listdir(NETNS_DIR) if n not in before and n.startswith("cni-")]


def _descendants(pid: int) -> list[int]:
    children: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid:
            children.append(int(entry.name))
    return [d for c in children for d in (*_descendants(c), c)]


def _shim_pids(work_dir: Path) -> list[int]:
    socket = str(work_dir / "containerd.sock").encode()
    return [
        pid
        for pid, argv in processes()
        if argv[0].endswith(b"containerd-shim-runc-v2") and socket in argv
    ]


def _kill_containers(work_dir: Path) -> None:
    """SIGKILL every container process and shim of this node's containerd (shims outlive it)."""
    for _ in range(3):
        shims = _shim_pids(work_dir)
        if not shims:
            return
        for shim in shims:
            for pid in (*_descendants(shim), shim):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)


def _unmount_under(root: Path) -> None:
    prefix = str(root.resolve()) + "/"
    for _ in range(3):
        points = sorted((p for p in mountpoints() if p.startswith(prefix)), key=len, reverse=True)
        if not points:
            return
        for point in points:
            _run("umount", "-l", point, check=False)


def _remove_cgroups() -> None:
    """Remove the kubepods cgroups the kubelet made in every v1 hierarchy (deepest first)."""
    if not CGROUP_ROOT.exists():
        return
    for hierarchy in CGROUP_ROOT.iterdir():
        top = hierarchy / "kubepods"
        if not top.is_dir():
            continue
        dirs = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
        for d in [*dirs, top]:
            with contextlib.suppress(OSError):
                d.rmdir()


def start_node(
    plane: KubeControlPlane,
    net: PodNetwork,
    work_dir: Path,
    *,
    images: list[Path],
    pause_image: str,
    timeout: float = 120.0,
) -> Node:
    """Start containerd, import ``images``, start the kubelet and kube-proxy; wait for Ready."""
    if os.geteuid() != 0:
        raise ServiceError("the local node needs root (containerd, network namespaces, iptables)")
    try:
        lock = take_node_lock()
    except NodeLockError as err:
        raise ServiceError(str(err)) from None
    # Only a run that was killed (SIGKILL, a machine restart) leaves anything; with the lock held
    # no other node runs, so what is there is an orphan: clear it before the snapshot records it.
    # The bridge and object store are this stack's own by now (a stale bridge was replaced).
    swept = sweep_leftovers(stack_started=True)
    if swept:
        print(f"[node] removed {len(swept)} leftovers of an interrupted earlier run", flush=True)
    work_dir.mkdir(parents=True, exist_ok=True)
    node = Node(NODE_NAME, work_dir, HostSnapshot.take(), lock)
    try:
        _start_containerd(node, pause_image, net, timeout)
        for image in images:
            t0 = time.monotonic()
            node.import_image(image)
            print(f"[node] imported {image.name} in {time.monotonic() - t0:.0f}s", flush=True)
        _start_kubelet(node, plane, net, timeout)
        _start_kube_proxy(node, plane, net, timeout)
        start_network_policies(node, plane, timeout)
    except BaseException:
        node.stop()
        raise
    return node


def _start_containerd(node: Node, pause_image: str, net: PodNetwork, timeout: float) -> None:
    work = node.work_dir
    (work / "cni" / "net.d").mkdir(parents=True, exist_ok=True)
    (work / "cni" / "net.d" / "10-deltaflow.conflist").write_text(
        json.dumps(_cni_config(work, net), indent=2)
    )
    config = work / "containerd.toml"
    config.write_text(_containerd_config(work, pause_image))
    containerd = Service(
        "containerd", ["containerd", "--config", str(config)], work / "containerd.log"
    )
    node.services.append(containerd)
    containerd.start()
    containerd.wait_ready(
        lambda: "Server:" in _run("ctr", "-a", str(node.containerd_socket), "version"),
        timeout,
        "serving",
    )


def _start_kubelet(node: Node, plane: KubeControlPlane, net: PodNetwork, timeout: float) -> None:
    work = node.work_dir
    config = work / "kubelet.yaml"
    config.write_text(json.dumps(_kubelet_config(work, plane, net), indent=2))
    kubelet = Service(
        "kubelet",
        [
            str(plane.bin_dir / "kubelet"),
            f"--config={config}",
            f"--kubeconfig={plane.kubeconfig}",
            f"--root-dir={work / 'kubelet'}",
            f"--cert-dir={work / 'kubelet-pki'}",
            f"--node-ip={net.gateway}",
            f"--hostname-override={node.name}",
            "--v=1",
        ],
        work / "kubelet.log",
    )
    node.services.append(kubelet)
    kubelet.start()

    def node_ready() -> bool:
        out = plane.kubectl(
            "get",
            "node",
            node.name,
            "-o",
            "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
            check=False,
        )
        return out.stdout.strip() == "True"

    kubelet.wait_ready(node_ready, timeout, f"registered node {node.name} as Ready")


def _start_kube_proxy(node: Node, plane: KubeControlPlane, net: PodNetwork, timeout: float) -> None:
    work = node.work_dir
    config = work / "kube-proxy.yaml"
    proxy_config = _kube_proxy_config(work, plane.kubeconfig, net)
    config.write_text(json.dumps(proxy_config, indent=2))
    proxy = Service(
        "kube-proxy",
        [str(plane.bin_dir / "kube-proxy"), f"--config={config}", "--v=1"],
        work / "kube-proxy.log",
    )
    node.services.append(proxy)
    proxy.start()

    def programmed() -> bool:
        # The `kubernetes` Service's ClusterIP has its DNAT rule: in-cluster clients work.
        return "KUBE-SVC-" in _run("iptables-save", "-t", "nat", check=False)

    proxy.wait_ready(programmed, timeout, "programming Service rules")


NETWORK_POLICIES = "kube-network-policies"
NFQUEUE = 100  # the nfnetlink queue its nftables rule sends packets to (its default)


def _queue_bound(queue: int) -> bool:
    """Whether a process listens on the nfnetlink queue (its first column in the kernel's list)."""
    lines = Path("/proc/net/netfilter/nfnetlink_queue").read_text().splitlines()
    return any(line.split()[:1] == [str(queue)] for line in lines)


def start_network_policies(node: Node, plane: KubeControlPlane, timeout: float) -> None:
    """Start the NetworkPolicy enforcer (stack/install/network-policies.sh) for this node.

    The first packet of each new connection from or to a pod a policy selects goes to the
    enforcer (an nftables rule, NFQUEUE), which accepts or drops it by the policies; pods no
    policy selects, and the node's root processes (the kubelet's probes), are not judged. It
    fails closed: while it does not answer, those pods get no new connections. It watches pods,
    namespaces and policies with the admin kubeconfig, as kube-proxy here does (a copy in the
    node's work folder, so its command line names the node, like every node process)."""
    work = node.work_dir
    kubeconfig = work / "network-policies.kubeconfig"
    write_kubeconfig(kubeconfig, plane.server, plane.ca_file, plane.admin_token)
    binary = installed_path("network-policies") / NETWORK_POLICIES
    # A table left by a run that was killed: the enforcer makes its own afresh.
    _run(str(binary), "-cleanup", check=False)
    enforcer = Service(
        NETWORK_POLICIES,
        [
            str(binary),
            f"-kubeconfig={kubeconfig}",
            f"-hostname-override={node.name}",
            f"-metrics-bind-address=127.0.0.1:{free_port()}",
            f"-nfqueue-id={NFQUEUE}",
            "-v=1",
        ],
        work / "kube-network-policies.log",
    )
    node.services.append(enforcer)
    enforcer.start()

    def enforcing() -> bool:
        table = _run("nft", "list", "table", "inet", NFT_TABLE, check=False)
        return "queue" in table and _queue_bound(NFQUEUE)

    enforcer.wait_ready(enforcing, timeout, "enforcing NetworkPolicies (table and queue)")


def record_container_pids(node: Node) -> None:
    """Record every container process pid, so the run's leftover check covers them too."""
    for shim in _shim_pids(node.work_dir):
        record_pid(shim)
        for pid in _descendants(shim):
            record_pid(pid)


__all__ = ["Node", "start_node", "tail"]
