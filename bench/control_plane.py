"""The operator's control plane at scale on the local cluster: 1, 10 and 50 DeltaIngestions.

The operator runs as the chart installs it (two replicas on the node, one leading). Every
resource's driver asks for a node pool that does not exist, so its pod is created and stays
Pending: that is the operator's whole job without Spark's cost (50 drivers would not fit on a
2-core node), and it is the case of a cluster short of room. For each count it prints:

- from ``kubectl apply`` of all the resources to each driver pod created and to each first
  status, p50 and p99;
- at steady state (the pods Pending and diagnosed, nothing changing), over ``--steady-seconds``:
  the operator's CPU (both replicas, from /proc) and memory, and the API requests the cluster
  served per minute, from the API server's own ``apiserver_request_total`` (watches excluded);
  per resource: minus the same figure with no resource, measured first in this run.

Needs root (the node) and the node to itself (about 10 min).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import signal
import statistics
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from autoscale_node import Api, Clock, _terminate, node_holder, wait_for

from devstack.cluster import install_operator, start_cluster, stop_cluster
from devstack.demo import cluster_manifest
from devstack.kube import KubeControlPlane
from devstack.leftovers import LOCK_FILE, empty_work_folder, processes
from devstack.network import create_bridge, remove_bridge

NS = "cp-bench"
PENDING_DEADLINE_SECONDS = 20  # the chart's is 120 s: Degraded sooner, so steady sooner
TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Steady:
    """One steady-state window."""

    seconds: float
    requests: dict[str, float]  # verb -> requests served in the window
    cpu_seconds: float  # both operator replicas
    rss_mb: list[float]  # per replica, at the end

    @property
    def per_minute(self) -> float:
        """API requests per minute, every verb."""
        return sum(self.requests.values()) * 60 / self.seconds


def request_counts(api: Api, by: tuple[str, ...] = ("verb",)) -> dict[str, float]:
    """apiserver_request_total summed per the labels ``by`` (joined by spaces, empty ones left
    out: ``("verb", "resource", "subresource")`` gives "PATCH deltaingestions status"), watches
    left out (they are long-lived)."""
    request = urllib.request.Request(
        api.server + "/metrics", headers={"Authorization": f"Bearer {api.token}"}
    )
    with urllib.request.urlopen(request, context=api.context, timeout=10) as response:
        text = response.read().decode()
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels, value = line.rsplit(" ", 1)
        named = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if named.get("verb") in ("WATCH", "WATCHLIST"):
            continue
        key = " ".join(v for v in (named.get(label, "") for label in by) if v)
        counts[key] = counts.get(key, 0.0) + float(value)
    return counts


def operator_pids() -> list[int]:
    """Host pids of the operator replicas' processes (`deltaflow operator` in their pods)."""
    # `deltaflow operator` from a console script: [python, .../bin/deltaflow, operator].
    pids = [
        pid
        for pid, argv in processes()
        if any(a.endswith(b"/deltaflow") and b == b"operator" for a, b in itertools.pairwise(argv))
    ]
    return sorted(pids)


def cpu_seconds(pids: list[int]) -> float:
    """user + system CPU seconds of the processes (threads included)."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / TICKS


def rss_mb(pid: int) -> float:
    """Resident memory in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def measure(clock: Clock, api: Api, seconds: float) -> Steady:
    """Requests, CPU and memory over one window."""
    pids = operator_pids()
    if len(pids) != 2:
        raise RuntimeError(f"expected the chart's two operator processes, found {pids}")
    before, cpu_before = request_counts(api), cpu_seconds(pids)
    t0 = time.monotonic()
    time.sleep(seconds)
    after, cpu_after = request_counts(api), cpu_seconds(pids)
    elapsed = time.monotonic() - t0
    served = {v: after.get(v, 0.0) - before.get(v, 0.0) for v in after}
    steady = Steady(elapsed, served, cpu_after - cpu_before, [rss_mb(p) for p in pids])
    clock.say(f"window of {elapsed:.0f}s: {steady.per_minute:.0f} requests/min")
    return steady


def manifest(name: str) -> dict[str, object]:
    """A stream whose driver cannot be placed: it stays Pending, diagnosed Unschedulable."""
    document = cluster_manifest(name, "kafka.invalid:9092", namespace=NS)
    spec = document["spec"]
    spec["driver"]["pod"] = {"nodeSelector": {"deltaflow.io/bench-pool": "none"}}
    return document


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def run_count(clock: Clock, plane: KubeControlPlane, api: Api, count: int, steady_s: float) -> Row:
    """Create ``count`` resources, time them, measure the steady state, delete them."""
    names = [f"cp-{count}-{i}" for i in range(count)]
    documents = {"apiVersion": "v1", "kind": "List", "items": [manifest(n) for n in names]}
    applied = time.monotonic()
    plane.kubectl("apply", "-f", "-", stdin=json.dumps(documents))
    pod_at: dict[str, float] = {}
    status_at: dict[str, float] = {}
    deadline = applied + 300
    while (len(pod_at) < count or len(status_at) < count) and time.monotonic() < deadline:
        now = time.monotonic() - applied
        pods = api.get(f"/api/v1/namespaces/{NS}/pods")["items"]
        for pod in pods:
            owner = pod["metadata"].get("labels", {}).get("app.kubernetes.io/instance")
            if owner in names:
                pod_at.setdefault(owner, now)
        for item in api.get(f"/apis/deltaflow.io/v1alpha1/namespaces/{NS}/deltaingestions")[
            "items"
        ]:
            if (item.get("status") or {}).get("conditions"):
                status_at.setdefault(item["metadata"]["name"], now)
        time.sleep(0.25)
    if len(pod_at) < count or len(status_at) < count:
        raise TimeoutError(f"{count} resources: {len(pod_at)} pods, {len(status_at)} statuses")
    clock.say(f"{count}: every driver pod created and every status written")

    def degraded() -> bool:
        items = api.get(f"/apis/deltaflow.io/v1alpha1/namespaces/{NS}/deltaingestions")["items"]
        reasons = [
            c.get("reason")
            for i in items
            for c in (i.get("status") or {}).get("conditions", [])
            if c["type"] == "Degraded" and c["status"] == "True"
        ]
        return len(reasons) == count and set(reasons) == {"Unschedulable"}

    wait_for(clock, f"{count}: every driver diagnosed Unschedulable", degraded, timeout=180)
    time.sleep(15)  # the last writes of the diagnosis settle
    steady = measure(clock, api, steady_s)
    plane.kubectl("-n", NS, "delete", "deltaingestions", "--all", "--wait=true", "--timeout=300s")
    wait_for(
        clock,
        f"{count}: every driver pod gone",
        lambda: not api.get(f"/api/v1/namespaces/{NS}/pods")["items"],
        timeout=300,
    )
    return Row(count, list(pod_at.values()), list(status_at.values()), steady)


@dataclass
class Row:
    """One count's figures."""

    count: int
    to_pod: list[float]
    to_status: list[float]
    steady: Steady

    def text(self, baseline: Steady) -> str:
        """One line of the table."""
        s = self.steady
        extra = (s.per_minute - baseline.per_minute) / self.count
        return (
            f"{self.count:>3} | {statistics.median(self.to_pod):5.1f} / "
            f"{percentile(self.to_pod, 0.99):5.1f} s | {statistics.median(self.to_status):5.1f} / "
            f"{percentile(self.to_status, 0.99):5.1f} s | {s.cpu_seconds / s.seconds:.3f} | "
            f"{' + '.join(f'{m:.0f}' for m in s.rss_mb)} MiB | {s.per_minute:7.1f} | "
            f"{extra:6.1f} | {_verbs(s)}"
        )


def _verbs(steady: Steady) -> str:
    per_minute = {v: n * 60 / steady.seconds for v, n in steady.requests.items() if n}
    return ", ".join(f"{v} {n:.1f}" for v, n in sorted(per_minute.items()))


def main(argv: list[str] | None = None) -> int:
    """Start the cluster and the chart, measure each count, print the table, stop everything."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    ap.add_argument("--counts", default="1,10,50")
    ap.add_argument("--steady-seconds", type=float, default=60.0)
    ap.add_argument(
        "--out", type=Path, default=Path(tempfile.gettempdir()) / "deltaflow-control-plane"
    )
    args = ap.parse_args(argv)
    counts = [int(c) for c in args.counts.split(",")]
    clock = Clock("control-plane")
    holder = node_holder()
    if holder is not None:
        print(f"the local node is in use ({LOCK_FILE}: {holder})", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _terminate)
    out = args.out.resolve()
    empty_work_folder(out)
    net = create_bridge()
    plane: KubeControlPlane | None = None
    try:
        clock.say("starting the cluster")
        plane = start_cluster(out / "cluster", net)
        clock.say("helm install deltaflow charts/deltaflow --wait (chart defaults)")
        install_operator(
            plane, values={"operator.driverPendingDeadlineSeconds": str(PENDING_DEADLINE_SECONDS)}
        )
        plane.kubectl("create", "namespace", NS)
        api = Api(plane)
        time.sleep(15)
        clock.say("baseline: the operator with no resource")
        baseline = measure(clock, api, args.steady_seconds)
        rows = []
        for count in counts:
            clock.say(f"{count} resources")
            rows.append(run_count(clock, plane, api, count, args.steady_seconds))
    finally:
        if plane is not None:
            stop_cluster(plane)
        remove_bridge()
    print(
        "\nbaseline (no resource): "
        f"{baseline.per_minute:.1f} requests/min ({_verbs(baseline)}), operator CPU "
        f"{baseline.cpu_seconds / baseline.seconds:.3f} cores"
    )
    print(
        "  N | apply->driver pod p50/p99 | apply->status p50/p99 | operator CPU (cores) | "
        "RSS | API req/min | per resource over baseline | by verb (req/min)"
    )
    for row in rows:
        print(row.text(baseline))
    return 0


if __name__ == "__main__":
    sys.exit(main())
