"""Stream pools on the local node (issue 35): the operator installed with its chart, streams whose
drivers and pools are pods of the project's image, a KRaft broker and MinIO. Two scenarios:

- ``rate``: one member with ``spec.placement: auto`` goes 10 -> 5,000 -> 10 records/s beside
  trickles in its pool. It must leave for a driver of its own and come back, at most one move
  each way (Events ``MovedToDriver``/``MovedToPool``), every record exactly once by (partition,
  offset), and the other members unaffected: in their pool throughout, each one's freshness p99
  within its 60 s target (ages at commit, read from the tables).
- ``fleet``: 40 trickles at 10 records/s, 20 idle streams (all ``auto``: they start in pools)
  and one stream at 5,000 records/s with lag autoscaling on a driver of its own, for 30
  minutes. Per small stream: the pool pods' CPU and memory divided by their members (target
  <= 0.03 cores, <= 160 MiB); idle members: the pools' CPU per member while no record flows
  (<= 0.002 cores); freshness p99 of every trickle (<= 60 s); the large stream's lag against its
  target; exactly once on all 61 tables; what the control plane, the operator, Kafka, MinIO and
  the producers took of the two cores; and how many small streams fit the node at a 60 s target.

    bash bench/run.sh pool-rate  [--trickles 3] [--busy-rate 5000] [--minutes-busy 6]
                                 [--minutes-after 24]   (root, the node to itself, ~40 min)
    bash bench/run.sh pool-fleet [--trickles 40] [--idle 20] [--large-rate 5000] [--minutes 30]
                                 (root, the node to itself, ~50 min)
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from autoscale_node import NS, Api, Clock, node_holder, order_producer, produce_order, wait_for
from common import conclude, percentile
from control_plane import request_counts

REPO = Path(__file__).resolve().parent.parent
if str(REPO / "stack") not in sys.path:
    sys.path.insert(0, str(REPO / "stack"))

from devstack.cluster import (  # noqa: E402
    install_operator,
    lake_credentials,
    start_cluster,
    stop_cluster,
)
from devstack.demo import cluster_manifest, create_topic, running  # noqa: E402
from devstack.kafka import KafkaBroker, start_kafka  # noqa: E402
from devstack.kube import KubeControlPlane  # noqa: E402
from devstack.leftovers import LOCK_FILE, empty_work_folder  # noqa: E402
from devstack.minio import ObjectStore, start_minio  # noqa: E402
from devstack.network import create_bridge, remove_bridge  # noqa: E402

BUCKET = "lake"
TARGET_SECONDS = 60  # every small stream's freshness target
LARGE_TARGET_SECONDS = 60  # the large stream's lag target
TICK_SECONDS = 0.1
SAMPLE_SECONDS = 30.0
OPERATOR_VALUES = {
    # Pools that fit the 2-core node beside the large stream: their task threads stay 1, their
    # request is what trickles use of them.
    "pools.membersPerPool": "20",
    "pools.coreRequest": "300m",
    "pools.memory": "1536m",
}
# Pods of the operator's pools; a stream's own driver and executors.
POOL_SELECTOR = "app.kubernetes.io/component=pool"
CPU_TICK = os.sysconf("SC_CLK_TCK")
CONTROL_PLANE = {
    "etcd",
    "kube-apiserver",
    "kube-controll",
    "kube-scheduler",
    "kubelet",
    "containerd",
    "containerd-shim",
    "kube-proxy",
    "kube-network-po",
}


# -- producing -------------------------------------------------------------------------------


class Producers(threading.Thread):
    """JSON orders into many topics at rates that may change while it runs (one client, paced
    per 100 ms tick; counts follow each rate's integral, so a late tick is made up)."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(name="producers", daemon=True)
        self.bootstrap = bootstrap
        self.rates: dict[str, float] = {}
        self.due: dict[str, float] = {}
        self.produced: Counter[str] = Counter()
        self.halt = threading.Event()
        self.error: BaseException | None = None
        self._lock = threading.Lock()

    def set_rate(self, topic: str, rate: float) -> None:
        with self._lock:
            self.rates[topic] = rate
            self.due.setdefault(topic, float(self.produced[topic]))

    def run(self) -> None:
        try:
            self._loop()
        except BaseException as e:  # checked by the main thread
            self.error = e

    def _loop(self) -> None:
        producer = order_producer(self.bootstrap)
        rng = random.Random(7)
        last = time.monotonic()
        while not self.halt.is_set():
            now = time.monotonic()
            with self._lock:
                rates = dict(self.rates)
            for topic, rate in rates.items():
                self.due[topic] += rate * (now - last)
                for _ in range(int(self.due[topic]) - self.produced[topic]):
                    produce_order(producer, topic, self.produced[topic], rng)
                    self.produced[topic] += 1
            last = now
            producer.poll(0)
            time.sleep(max(0.0, now + TICK_SECONDS - time.monotonic()))
        if producer.flush(60) != 0:
            raise RuntimeError("records still unsent 60 s after the end")


# -- what runs where, and what it costs ------------------------------------------------------


def _pod_cgroup(uid: str, controller: str) -> Path | None:
    found = glob.glob(f"/sys/fs/cgroup/{controller}/kubepods/**/pod{uid}", recursive=True)
    return Path(found[0]) if found else None


def pod_cpu_seconds(uid: str) -> float | None:
    """CPU seconds every process of the pod used so far (its cgroup's, exited ones too)."""
    group = _pod_cgroup(uid, "cpuacct")
    with contextlib.suppress(OSError):
        return int((group / "cpuacct.usage").read_text()) / 1e9 if group else None
    return None


def pod_rss_bytes(uid: str) -> int | None:
    """Resident memory of the pod's processes (its cgroup's rss, no page cache)."""
    group = _pod_cgroup(uid, "memory")
    with contextlib.suppress(OSError):
        if group:
            for line in (group / "memory.stat").read_text().splitlines():
                if line.startswith("total_rss "):
                    return int(line.split()[1])
    return None


def host_cpu(names: set[str] | None = None, pids: set[int] | None = None) -> dict[int, float]:
    """CPU seconds of this machine's processes by pid: those whose command name is in
    ``names`` (outside pods), or the pids given."""
    found: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            if names is not None and pids is None:
                if stat[stat.index("(") + 1 : stat.rindex(")")] not in names:
                    continue
                if "kubepods" in Path(f"/proc/{entry}/cgroup").read_text():
                    continue
            elif pids is not None and pid not in pids:
                continue
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        found[pid] = (int(fields[11]) + int(fields[12])) / CPU_TICK
    return found


@dataclass
class CpuClock:
    """A CPU total that survives processes exiting (each pid's highest reading)."""

    per_key: dict[Any, float] = field(default_factory=dict)

    def add(self, readings: dict[Any, float]) -> float:
        for key, seconds in readings.items():
            self.per_key[key] = max(self.per_key.get(key, 0.0), seconds)
        return sum(self.per_key.values())


@dataclass
class Meter:
    """Samples the node's CPU by part and the pools' memory; figures over a window."""

    plane: KubeControlPlane
    api: Api
    broker: KafkaBroker
    store: ObjectStore
    clocks: dict[str, CpuClock] = field(default_factory=dict)
    pool_rss: list[int] = field(default_factory=list)  # all pools' rss, per sample
    pool_members: list[int] = field(default_factory=list)
    # Why a fleet misses its freshness: pool pods restarted (and why), members started again
    # inside their pool (each start time a member reported), members not Running.
    pod_restarts: dict[str, tuple[int, str]] = field(default_factory=dict)
    member_starts: dict[str, set[float]] = field(default_factory=dict)
    member_phases: Counter[str] = field(default_factory=Counter)

    def pods(self, selector: str, namespace: str = NS) -> list[dict[str, Any]]:
        return list(
            self.api.get(f"/api/v1/namespaces/{namespace}/pods", labelSelector=selector)["items"]
        )

    def troubles(self) -> str:
        """Pool pod restarts (last reason), member starts after the first, phases not Running."""
        restarts = {n: r for n, r in self.pod_restarts.items() if r[0]}
        again = sum(len(starts) - 1 for starts in self.member_starts.values())
        phases = {k: v for k, v in self.member_phases.items() if k != "Running"}
        return f"pod restarts {restarts or 0}, member restarts {again}, not running {phases or 0}"

    def read(self) -> dict[str, float]:
        """CPU seconds so far of each part (pods by cgroup, host processes by pid)."""
        parts: dict[str, dict[Any, float]] = {}
        pools = self.pods(POOL_SELECTOR)
        parts["pools"] = {
            p["metadata"]["uid"]: pod_cpu_seconds(p["metadata"]["uid"]) or 0.0 for p in pools
        }
        rss = [pod_rss_bytes(p["metadata"]["uid"]) or 0 for p in pools if running(p)]
        members = 0
        self.member_phases = Counter()
        for pod in pools:
            report = (pod["metadata"].get("annotations") or {}).get("deltaflow.io/pool-report")
            for key, member in (json.loads(report).get("members", {}) if report else {}).items():
                members += 1
                self.member_phases[str(member.get("phase"))] += 1
                if member.get("startedAt") is not None:
                    self.member_starts.setdefault(key, set()).add(float(member["startedAt"]))
            for c in (pod.get("status") or {}).get("containerStatuses") or []:
                last = (c.get("lastState") or {}).get("terminated") or {}
                self.pod_restarts[pod["metadata"]["name"]] = (
                    int(c.get("restartCount", 0)),
                    str(last.get("reason", "")),
                )
        self.pool_rss.append(sum(rss))
        self.pool_members.append(members)
        # Every other pod of the namespace: the streams' own drivers and their executors.
        pool_uids = {p["metadata"]["uid"] for p in pools}
        others = [p for p in self.pods("") if p["metadata"]["uid"] not in pool_uids]
        parts["own drivers and executors"] = {
            p["metadata"]["uid"]: pod_cpu_seconds(p["metadata"]["uid"]) or 0.0 for p in others
        }
        operator = self.pods("app.kubernetes.io/name=deltaflow", "deltaflow-system")
        parts["operator"] = {
            p["metadata"]["uid"]: pod_cpu_seconds(p["metadata"]["uid"]) or 0.0 for p in operator
        }
        parts["control plane and node"] = host_cpu(names=CONTROL_PLANE)
        parts["kafka"] = host_cpu(pids={self.broker.service.pid})
        parts["minio"] = host_cpu(pids={self.store.service.pid})
        parts["producers and this bench"] = host_cpu(pids={os.getpid()})
        return {name: self.clocks.setdefault(name, CpuClock()).add(r) for name, r in parts.items()}


def cores_between(
    first: dict[str, float], last: dict[str, float], seconds: float
) -> dict[str, float]:
    return {k: (last[k] - first.get(k, 0.0)) / seconds for k in last}


# -- tables ----------------------------------------------------------------------------------


def commit_ages(store: ObjectStore, table: str, since: float) -> list[float]:
    """Each row's age at the commit that added it (seconds), of commits at ``since`` or later:
    the commit's timestamp against the row's Kafka timestamp, read from the log and the files
    (every row once: no full-table read per version)."""
    import pyarrow.parquet as pq

    s3 = store.filesystem()
    root = table.removeprefix("s3a://")
    ages: list[float] = []
    for _version, actions in sorted(store.delta_commits(table).items()):
        info: dict[str, Any] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        at = float(info.get("timestamp", 0)) / 1000
        if at < since:
            continue
        for action in actions:
            add = action.get("add")
            if add and add.get("dataChange", True):
                from urllib.parse import unquote

                rows = pq.read_table(
                    f"{root}/{unquote(add['path'])}", filesystem=s3, columns=["_kafka_timestamp"]
                )
                ages += [at - t.timestamp() for t in rows.column(0).to_pylist()]
    return ages


def exactly_once(store: ObjectStore, broker: KafkaBroker, name: str) -> tuple[int, int, int, int]:
    """(expected, doubled, lost, unexpected) by (partition, offset), table and dead letters."""
    from confluent_kafka import Consumer, TopicPartition
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "bench"})
    try:
        meta = consumer.list_topics(name, timeout=10).topics[name]
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(name, p), timeout=10)[1]
            for p in meta.partitions
        }
    finally:
        consumer.close()
    rows: list[tuple[int, int]] = []
    for uri in (f"s3a://{BUCKET}/{name}", f"s3a://{BUCKET}/{name}_dead_letter"):
        with contextlib.suppress(TableNotFoundError):
            data = DeltaTable(
                uri.replace("s3a://", "s3://"), storage_options=store.storage_options()
            ).to_pyarrow_table(columns=["_kafka_partition", "_kafka_offset"])
            rows += zip(data.column(0).to_pylist(), data.column(1).to_pylist(), strict=True)
    wanted = {(p, o) for p, end in ends.items() for o in range(end)}
    counts = Counter(rows)
    return (
        len(wanted),
        sum(1 for n in counts.values() if n > 1),
        len(wanted - counts.keys()),
        len(counts.keys() - wanted),
    )


def wait_landed(
    clock: Clock, store: ObjectStore, broker: KafkaBroker, names: list[str], timeout: float = 600
) -> dict[str, tuple[int, int, int, int]]:
    """Each table's exactly-once figures once nothing is lost (or at the timeout)."""
    deadline = time.monotonic() + timeout
    results: dict[str, tuple[int, int, int, int]] = {}
    pending = list(names)
    while pending:
        for name in list(pending):
            results[name] = exactly_once(store, broker, name)
            if results[name][2] == 0:
                pending.remove(name)
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(10)
    clock.say(f"landed: {len(names) - len(pending)} of {len(names)} tables complete")
    return results


# -- the stack -------------------------------------------------------------------------------


@dataclass
class Stack:
    clock: Clock
    plane: KubeControlPlane
    api: Api
    broker: KafkaBroker
    store: ObjectStore
    producers: Producers

    def manifest(self, name: str, placement: str, partitions: int = 1) -> dict[str, Any]:
        """The demo's DeltaIngestion on the object store with a 60 s freshness target."""
        assert self.broker.pod_bootstrap_servers is not None
        create_topic(self.broker, name, partitions)
        doc = cluster_manifest(
            name,
            self.broker.pod_bootstrap_servers,
            topic=name,
            namespace=NS,
            storage=self.store.storage_spec(),
            lake=f"s3a://{BUCKET}",
        )
        spec = doc["spec"]
        del spec["trigger"]  # derived from the freshness target
        # A batch takes what waits (a pool caps each member's at its own default): a cap with
        # a trigger derived from a 60 s target would hold a 5k records/s stream below its rate.
        del spec["source"]["maxOffsetsPerTrigger"]
        spec["freshness"] = {"targetSeconds": TARGET_SECONDS}
        spec["placement"] = placement
        spec["scaling"] = {
            "minExecutors": 0,
            "maxExecutors": 2,
            "targetLagSeconds": LARGE_TARGET_SECONDS,
        }
        # No OPTIMIZE/VACUUM pod firing mid-run.
        spec["maintenance"] = {"optimize": {"enabled": False}, "vacuum": {"enabled": False}}
        return doc

    def apply(self, docs: list[dict[str, Any]]) -> None:
        self.plane.kubectl(
            "apply",
            "-f",
            "-",
            stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}),
        )

    def status(self, name: str) -> dict[str, Any]:
        return self.api.status(name)

    def events(self, name: str, reason: str) -> list[str]:
        items = self.api.get(
            f"/api/v1/namespaces/{NS}/events", fieldSelector=f"involvedObject.name={name}"
        )["items"]
        return [str(e.get("message", "")) for e in items if e.get("reason") == reason]


@contextlib.contextmanager
def node_stack(clock: Clock, out: Path) -> Iterator[Stack]:
    """Bridge, Kafka, MinIO, the cluster, the operator (pool values above), the namespace with
    the store's Secret; all stopped at the end."""
    net = create_bridge()
    broker = store = plane = None
    try:
        clock.say("starting Kafka (KRaft) and MinIO on the pod network's gateway")
        broker = start_kafka(out / "kafka", pod_address=net.gateway)
        store = start_minio(out / "minio", address=net.gateway)
        store.create_bucket(BUCKET)
        clock.say("starting the cluster")
        plane = start_cluster(out / "cluster", net)
        clock.say(
            f"helm install deltaflow ({', '.join(f'{k}={v}' for k, v in OPERATOR_VALUES.items())})"
        )
        install_operator(plane, values=OPERATOR_VALUES)
        plane.kubectl("create", "namespace", NS)
        plane.kubectl("label", "namespace", NS, "pod-security.kubernetes.io/enforce=restricted")
        lake_credentials(plane, NS, store)
        producers = Producers(broker.bootstrap_servers)
        producers.start()
        try:
            yield Stack(clock, plane, Api(plane), broker, store, producers)
        finally:
            producers.halt.set()
            producers.join(90)
    finally:
        clock.say("stopping the cluster, Kafka and MinIO")
        if plane is not None:
            stop_cluster(plane)
        if store is not None:
            store.stop()
        if broker is not None:
            broker.stop()
        remove_bridge()


def in_pool(stack: Stack, name: str) -> str | None:
    """The pool a stream runs in, Ready (None otherwise)."""
    status = stack.status(name)
    placement = status.get("placement") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    return (
        str(placement["pool"])
        if placement.get("mode") == "pooled" and ready and placement.get("pool")
        else None
    )


# -- rate ------------------------------------------------------------------------------------


@dataclass
class Moves:
    """Where the mover ran, seconds after its step up: when it left its pool and came back."""

    left_at: float | None = None
    back_at: float | None = None
    modes: list[tuple[float, str]] = field(default_factory=list)
    trickle_pools: set[str] = field(default_factory=set)


def _follow(stack: Stack, args: argparse.Namespace, mover: str, trickles: list[str]) -> Moves:
    """The step up and down on ``mover``, its placement sampled every 10 s until it has been
    back in a pool for 2 minutes after the rate fell (or the time is up)."""
    clock, moves = stack.clock, Moves()
    stack.producers.set_rate(mover, args.busy_rate)
    busy_at = time.monotonic()
    clock.say(f"{mover}: {args.busy_rate:,.0f} records/s")
    end_busy = busy_at + args.minutes_busy * 60
    end = end_busy + args.minutes_after * 60
    slowed = False
    while time.monotonic() < end:
        if not slowed and time.monotonic() >= end_busy:
            stack.producers.set_rate(mover, 10)
            slowed = True
            clock.say(f"{mover}: back to 10 records/s")
        placement = stack.status(mover).get("placement") or {}
        t, mode = time.monotonic() - busy_at, str(placement.get("mode"))
        if not moves.modes or moves.modes[-1][1] != mode:
            clock.say(f"{mover}: {mode} ({placement.get('reason')}: {placement.get('message')})")
            moves.modes.append((t, mode))
        if moves.left_at is None and mode != "pooled":
            moves.left_at = t
        if moves.left_at is not None and moves.back_at is None and mode == "pooled":
            moves.back_at = t
        for name in trickles:
            moves.trickle_pools.add(str((stack.status(name).get("placement") or {}).get("pool")))
        if moves.back_at is not None and slowed and t > moves.back_at + 120:
            break
        time.sleep(10)
    return moves


def rate(stack: Stack, args: argparse.Namespace) -> bool:
    """The rate scenario; whether it held."""
    clock = stack.clock
    trickles = [f"trickle-{i}" for i in range(args.trickles)]
    mover = "mover"
    stack.apply(
        [stack.manifest(mover, "auto", partitions=3)]
        + [stack.manifest(n, "pooled") for n in trickles]
    )
    for name in [mover, *trickles]:
        stack.producers.set_rate(name, 10)
        wait_for(clock, f"{name} Ready in a pool", partial(in_pool, stack, name), 600, 2)
    time.sleep(args.minutes_before * 60)
    measured_from = time.time()
    moves = _follow(stack, args, mover, trickles)
    for name in [mover, *trickles]:
        stack.producers.set_rate(name, 0)
    time.sleep(5)
    landed = wait_landed(clock, stack.store, stack.broker, [mover, *trickles])
    to_driver = stack.events(mover, "MovedToDriver")
    to_pool = stack.events(mover, "MovedToPool")
    busy = args.minutes_busy * 60
    print(f"\n== pool-rate: 10 -> {args.busy_rate:,.0f} -> 10 records/s on one auto member")
    print(f"its places (s after the step up, which lasted {busy:.0f} s): {moves.modes}")
    back = None if moves.back_at is None else round(moves.back_at - busy)
    print(
        f"left its pool {moves.left_at} s after the step up; back in a pool {back} s after the "
        "rate fell"
    )
    print(f"MovedToDriver x{len(to_driver)}: {to_driver}")
    print(f"MovedToPool x{len(to_pool)} (the first is its start): {to_pool}")
    ok = moves.back_at is not None and len(to_driver) == 1 and len(to_pool) == 2
    for name, (expected, doubled, lost, unexpected) in landed.items():
        line = (
            f"{name}: {expected:,} records, {doubled} doubled, {lost} lost, {unexpected} unexpected"
        )
        if name != mover:
            ages = commit_ages(stack.store, f"s3a://{BUCKET}/{name}", measured_from)
            p99 = percentile(ages, 99) if ages else float("inf")
            line += f"; ages at commit p50 {percentile(ages, 50):.1f} / p99 {p99:.1f} s"
            ok &= p99 <= TARGET_SECONDS
        print(line)
        ok &= doubled == lost == unexpected == 0
    print(f"trickles' pools during the run: {sorted(moves.trickle_pools)}")
    return ok and len(moves.trickle_pools) == 1


# -- fleet -----------------------------------------------------------------------------------


@dataclass
class FleetRun:
    """What the fleet scenario measured."""

    small: list[str]
    trickles: list[str]
    idle_cores: dict[str, float]  # by part, every small stream idle
    cores: dict[str, float]  # by part, the measured window
    seconds: float
    measured_from: float  # wall clock
    requests_per_minute: float
    requests_by_kind: dict[str, float]  # "VERB resource [subresource]" -> per minute
    lags: list[float]  # the large stream's lag samples (seconds)
    pool_rss: list[int]
    landed: dict[str, tuple[int, int, int, int]]
    troubles: str


LARGE = "large"
OPERATOR_CORES_PER_50 = 0.018  # CP1, bench/README
OPERATOR_REQUESTS_PER_RESOURCE = 1.0  # a minute: the "about one"


def trickles_view(api: Api) -> str:
    """The trickles' own freshness reports in one line: how many pooled, their trigger
    intervals and batch times (medians), their p99 ages (median, max)."""
    items = api.get(f"/apis/deltaflow.io/v1alpha1/namespaces/{NS}/deltaingestions")["items"]
    statuses = [i.get("status") or {} for i in items if i["metadata"]["name"].startswith("trickle")]
    fresh = [s.get("freshness") or {} for s in statuses]
    pooled = sum(1 for s in statuses if (s.get("placement") or {}).get("mode") == "pooled")

    def med(key: str) -> str:
        values = [float(f[key]) for f in fresh if f.get(key) is not None]
        return f"{percentile(values, 50):.1f}" if values else "-"

    p99s = [float(f["p99Seconds"]) for f in fresh if f.get("p99Seconds") is not None]
    worst = f"{max(p99s):.0f}" if p99s else "-"
    return (
        f"{pooled}/{len(statuses)} pooled, trigger {med('triggerSeconds')} s, batch "
        f"{med('batchSeconds')} s, p99 {med('p99Seconds')} s (max {worst})"
    )


def operator_requests(by_kind: dict[str, float]) -> float:
    """Requests per minute of the kinds only the operator sends here: every request on
    DeltaIngestions, ConfigMaps (the pools') and Events, every server-side APPLY (its
    children), the LISTs of its children's other kinds (its drift repair's watches start with
    one; watches themselves are long-lived and not counted, as in CP1), and pod LISTs (the
    pool keeper). Its leader Lease (a fixed 40/min, CP1's baseline) and its pod
    writes (rare; the pools' and drivers' reports are pod PATCHes too) are left out."""
    watched = ("networkpolicies", "serviceaccounts", "services", "cronjobs", "rolebindings")
    total = 0.0
    for kind, n in by_kind.items():
        verb, _, rest = kind.partition(" ")
        resource = rest.split(" ")[0]
        if (
            resource in ("deltaingestions", "configmaps", "events")
            or verb == "APPLY"
            or kind == "LIST pods"
            or (verb == "LIST" and resource in watched)
        ):
            total += n
    return total


def _run_fleet(stack: Stack, args: argparse.Namespace) -> FleetRun:
    clock, meter = stack.clock, Meter(stack.plane, stack.api, stack.broker, stack.store)
    trickles = [f"trickle-{i}" for i in range(args.trickles)]
    small = [*trickles, *(f"idle-{i}" for i in range(args.idle))]
    stack.apply(
        [stack.manifest(n, "auto") for n in small]
        + [stack.manifest(LARGE, "dedicated", partitions=3)]
    )
    for name in small:
        wait_for(clock, f"{name} Ready in a pool", partial(in_pool, stack, name), 900, 3)
    # An idle member's steady cost: its start (session, first reads, the JIT) is paid once.
    clock.say(f"{len(small)} members in pools, no record: settling {args.settle_minutes:g} min")
    time.sleep(args.settle_minutes * 60)
    clock.say(f"measuring idle members for {args.idle_minutes:g} min")
    first, t0 = meter.read(), time.monotonic()
    time.sleep(args.idle_minutes * 60)
    idle_cores = cores_between(first, meter.read(), time.monotonic() - t0)
    for name in trickles:
        stack.producers.set_rate(name, 10)
    stack.producers.set_rate(LARGE, args.large_rate)
    clock.say(
        f"{len(trickles)} trickles at 10 records/s, {LARGE} at {args.large_rate:,.0f}; "
        f"warming up {args.warmup_minutes:g} min"
    )
    time.sleep(args.warmup_minutes * 60)
    measured_from = time.time()
    first, t0 = meter.read(), time.monotonic()
    by_kind = ("verb", "resource", "subresource")
    requests0 = request_counts(stack.api, by_kind)
    lags: list[float] = []
    while time.monotonic() < t0 + args.minutes * 60:
        time.sleep(SAMPLE_SECONDS)
        meter.read()
        lag = (stack.status(LARGE).get("lag") or {}).get("seconds")
        if lag is not None:
            lags.append(float(lag))
        clock.say(
            f"pools: {meter.pool_members[-1]} members, rss {meter.pool_rss[-1] / 2**20:,.0f} "
            f"MiB, {meter.troubles()}; trickles: {trickles_view(stack.api)}; {LARGE}: lag {lag} s"
        )
    seconds = time.monotonic() - t0
    cores = cores_between(first, meter.read(), seconds)
    requests1 = request_counts(stack.api, by_kind)
    by_minute = {k: (n - requests0.get(k, 0.0)) / (seconds / 60) for k, n in requests1.items()}
    requests = sum(by_minute.values())
    for name in [*trickles, LARGE]:
        stack.producers.set_rate(name, 0)
    time.sleep(5)
    landed = wait_landed(clock, stack.store, stack.broker, [*small, LARGE], timeout=900)
    return FleetRun(
        small,
        trickles,
        idle_cores,
        cores,
        seconds,
        measured_from,
        requests,
        by_minute,
        lags,
        meter.pool_rss,
        landed,
        meter.troubles(),
    )


def fleet(stack: Stack, args: argparse.Namespace) -> bool:
    """The fleet scenario; whether every target held."""
    run = _run_fleet(stack, args)
    members, cores = len(run.small), run.cores
    rss = percentile([float(r) for r in run.pool_rss], 50) / 2**20
    print(
        f"\n== pool-fleet: {len(run.trickles)} trickles x 10 records/s + "
        f"{members - len(run.trickles)} idle (auto, in pools) + {LARGE} at "
        f"{args.large_rate:,.0f} records/s, {run.seconds / 60:.0f} min"
    )
    print("cores by part (measured window):")
    for part, value in sorted(cores.items(), key=lambda kv: -kv[1]):
        print(f"  {part:28s} {value:6.3f}")
    per_small, per_idle = cores["pools"] / members, run.idle_cores["pools"] / members
    print(
        f"per small stream: {per_small:.4f} cores (target 0.03), {rss / members:.0f} MiB "
        f"(target 160; the pools' rss p50 {rss:,.0f} MiB / {members} members)"
    )
    print(f"per idle member (all idle, {args.idle_minutes:g} min): {per_idle:.4f} cores (0.002)")
    # The control-plane target: what the operator took at 50 resources without pools
    # (CP1: 0.018 cores, 0.7 requests per resource a minute over its fixed Lease traffic),
    # scaled to this fleet's count.
    operator_target = OPERATOR_CORES_PER_50 * (members + 1) / 50
    print(
        f"operator: {cores['operator']:.3f} cores (target {operator_target:.3f}); API requests "
        f"(all clients): {run.requests_per_minute:.0f}/min for {members + 1} resources"
    )
    kinds = sorted(run.requests_by_kind.items(), key=lambda kv: -kv[1])
    print("  by kind: " + ", ".join(f"{k} {n:.1f}" for k, n in kinds if n >= 0.5))
    mine = operator_requests(run.requests_by_kind)
    print(
        f"  the operator's kinds (its resources, ConfigMaps, Events, APPLYs, pod LISTs; not "
        f"its Lease): {mine:.0f}/min, {mine / (members + 1):.2f} per resource (target "
        f"{OPERATOR_REQUESTS_PER_RESOURCE})"
    )
    ok = per_small <= 0.03 and rss / members <= 160 and per_idle <= 0.002
    ok = ok and cores["operator"] <= operator_target
    ok = ok and mine / (members + 1) <= OPERATOR_REQUESTS_PER_RESOURCE
    p99s, worst = [], []
    for name in run.trickles:
        ages = commit_ages(stack.store, f"s3a://{BUCKET}/{name}", run.measured_from)
        p99s.append(percentile(ages, 99) if ages else float("inf"))
        worst.append((p99s[-1], max(ages, default=float("inf")), name))
    print(
        "worst trickles (p99, max age): "
        + ", ".join(f"{n} {p:.0f}/{m:.0f} s" for p, m, n in sorted(worst, reverse=True)[:5])
    )
    print(
        f"trickles' freshness p99: max {max(p99s):.1f} s, median {percentile(p99s, 50):.1f} s "
        f"(target {TARGET_SECONDS})"
    )
    lag_p99 = percentile(run.lags, 99) if run.lags else float("inf")
    over = sum(1 for lag in run.lags if lag > LARGE_TARGET_SECONDS)
    print(
        f"{LARGE}: lag p99 {lag_p99:.0f} s, over its {LARGE_TARGET_SECONDS} s target in {over} "
        f"of {len(run.lags)} samples"
    )
    bad = {n: r for n, r in run.landed.items() if r[1] or r[2] or r[3]}
    print(f"exactly once: {len(run.landed) - len(bad)} of {len(run.landed)} tables; off: {bad}")
    print(f"pools: {run.troubles}")
    own = cores["own drivers and executors"]
    fixed = sum(cores.values()) - cores["pools"] - own
    fits = int(max(2.0 - fixed - own, 0.0) / per_small) if per_small > 0 else 0
    print(
        f"the node's 2 cores less the rest ({fixed:.2f} fixed, {own:.2f} the large stream): "
        f"about {fits} small streams at 10 records/s and a {TARGET_SECONDS} s target"
    )
    return ok and max(p99s) <= TARGET_SECONDS and lag_p99 <= LARGE_TARGET_SECONDS and not bad


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    ap.add_argument("scenario", choices=("rate", "fleet"))
    ap.add_argument("--trickles", type=int)
    ap.add_argument("--idle", type=int, default=20)
    ap.add_argument("--busy-rate", type=float, default=5000)
    ap.add_argument("--minutes-before", type=float, default=3)
    ap.add_argument("--minutes-busy", type=float, default=6)
    ap.add_argument("--minutes-after", type=float, default=24)
    ap.add_argument("--large-rate", type=float, default=5000)
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--idle-minutes", type=float, default=5)
    ap.add_argument("--settle-minutes", type=float, default=2)
    ap.add_argument("--warmup-minutes", type=float, default=5)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    if args.trickles is None:
        args.trickles = 3 if args.scenario == "rate" else 40
    clock = Clock(f"pool-{args.scenario}")
    holder = node_holder()
    if holder is not None:
        print(f"the local node is in use ({LOCK_FILE}: {holder})", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    out = (args.out or Path(tempfile.gettempdir()) / f"deltaflow-pool-{args.scenario}").resolve()
    empty_work_folder(out)
    clock.say(f"work folder {out}")
    with node_stack(clock, out) as stack:
        ok = (rate if args.scenario == "rate" else fleet)(stack, args)
        if stack.producers.error is not None:
            print(f"the producers failed: {stack.producers.error!r}")
            ok = False
    return conclude(ok, f"pool-{args.scenario}", out, args.out)


if __name__ == "__main__":
    sys.exit(main())
