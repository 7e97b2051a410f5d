"""The driver's autoscaling agent: measure capacity per batch, apply the operator's executor count.

A daemon thread, every ``period`` seconds: read the count the operator wants from the driver's
pod, clamp it into the stream's spec.scaling bounds (anyone who may annotate the pod can write
that count; only the spec says how many pods the driver may ask for), set it live
(:class:`~deltaflow_runtime.executors.ExecutorControl`), publish a report with the executors, the
measured capacity and the stream's Kafka positions (log-end and committed offsets, from the
runtime's own Kafka poll). The operator reads lag from this report, so it needs neither a Kafka
client nor the stream's Secrets. The stream never waits on it: a failing API call is logged and
retried next round, and the executors stay as they are.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from deltaflow_runtime.capacity import (
    BatchSample,
    CapacityMeter,
    ExecutorStartClock,
    MeasuredCapacity,
)
from deltaflow_runtime.checkpoint import TopicOffsets
from deltaflow_runtime.config import ConfigError, load_ingestion
from deltaflow_runtime.cost import LoadMeter
from deltaflow_runtime.executors import Executors, ExecutorTotals

log = logging.getLogger("deltaflow.scaling")

HEARTBEAT_SECONDS = 10.0
# The Kafka part of the report, at most (about 5,000 partitions): the pod's annotations hold
# 256 KiB in all.
MAX_KAFKA_REPORT_BYTES = 128 * 1024


class Channel(Protocol):
    """Where the desired count comes from and the report goes (the driver's pod)."""

    def desired_executors(self) -> int | None: ...

    def publish(self, report: dict[str, Any]) -> None: ...


Bounds = tuple[int, int]  # spec.scaling's minExecutors, maxExecutors


def clamp_target(asked: int, bounds: Bounds) -> int:
    """The executor count to run when ``asked`` for one: within the stream's bounds."""
    low, high = bounds
    return min(max(asked, low), high)


class SpecBounds:
    """spec.scaling's bounds from the pipeline config the driver runs with, read again when the
    file changes: the operator applies new bounds in place (no new driver), rewriting the
    ConfigMap, and the kubelet swaps the mounted file within about a minute. Until then, and
    when the file cannot be read, the bounds last read hold."""

    def __init__(self, path: Path | None, initial: Bounds) -> None:
        self.path, self.bounds = path, initial
        self._key = self._stat()

    def _stat(self) -> tuple[int, int, int] | None:
        """The file's identity: the kubelet replaces a mounted ConfigMap's files, never edits."""
        if self.path is None:
            return None
        try:
            stat = self.path.stat()
        except OSError:
            return None
        return stat.st_ino, stat.st_mtime_ns, stat.st_size

    def __call__(self) -> Bounds:
        key = self._stat()
        if key is None or key == self._key or self.path is None:
            return self.bounds
        self._key = key
        try:
            scaling = load_ingestion(self.path).spec.scaling
        except ConfigError as error:
            log.warning("executor bounds kept at %s..%s: %s", *self.bounds, error)
            return self.bounds
        if (scaling.min_executors, scaling.max_executors) != self.bounds:
            log.info(
                "executor bounds: %s..%s -> %s..%s",
                *self.bounds,
                scaling.min_executors,
                scaling.max_executors,
            )
        self.bounds = (scaling.min_executors, scaling.max_executors)
        return self.bounds


class ScalingAgent:
    """Measures, applies and reports; one per running stream on a cluster."""

    def __init__(
        self,
        control: Executors,
        channel: Channel,
        query_id: str,
        bounds: Callable[[], Bounds],
        *,
        period: float = 2.0,
        freshness: Callable[[float], dict[str, Any]] | None = None,
        cost: Callable[[float], dict[str, Any] | None] | None = None,
        group_commit_problem: Callable[[], str] | None = None,
    ) -> None:
        self.control, self.channel, self.period = control, channel, period
        self.group_commit_problem = group_commit_problem
        self.freshness = freshness  # the report's freshness part, at a time
        self.cost = cost  # the report's cost part (None before it is measured)
        self.query_id = query_id
        self.bounds = bounds
        self._refused: int | None = None  # the last count asked for outside the bounds
        self.meter = CapacityMeter()
        # Cores its tasks keep busy: what the operator compares with a pool member's share to
        # place a stream with spec.placement auto (the same measure as a pool's PoolTaskTime).
        self.load = LoadMeter()
        self.start_clock = ExecutorStartClock(asked_at=control.started_at())
        self._lock = threading.Lock()
        self._last_totals: ExecutorTotals | None = None
        self._last_batch = -1
        self._last_batch_at: float | None = None  # wall clock: the operator compares with its own
        self._run_id = ""
        self._published: dict[str, Any] | None = None
        self._published_at = 0.0
        self._kafka: dict[str, Any] | None = None

    def on_batch(
        self, batch_id: int, records: int, wall_seconds: float, partitions: int
    ) -> BatchSample | None:
        """Count a finished batch: its share of busy task time since the previous one (returned,
        for the batch's log line; None for the first batch, which has no previous total)."""
        totals = self.control.totals()
        with self._lock:
            previous, self._last_totals = self._last_totals, totals
            self._last_batch = batch_id
            self._last_batch_at = time.time()
            if previous is None:
                return None
            sample = BatchSample(
                records=records,
                wall_seconds=wall_seconds,
                busy_core_seconds=totals.busy_core_seconds - previous.busy_core_seconds,
                slots=max(totals.cores, previous.cores),
                partitions=partitions,
            )
            self.meter.add(sample)
            return sample

    def observe_kafka(self, at: float, end: TopicOffsets, committed: TopicOffsets) -> None:
        """The topic's log-end offsets and the stream's committed ones, read at ``at``."""
        kafka = kafka_report(at, end, committed)
        with self._lock:
            self._kafka = kafka

    def kafka_failed(self, at: float, error: str) -> None:
        """The last Kafka poll failed: the operator holds the count and says why."""
        with self._lock:
            self._kafka = {"at": round(at, 3), "error": error[:500]}

    def set_run_id(self, run_id: str) -> None:
        """The query's current run (changes when the query restarts, never on scaling)."""
        self._run_id = run_id

    def step(self) -> dict[str, Any]:
        """One round: apply the desired count, then publish and return the report."""
        asked = self.channel.desired_executors()
        bounds = self.bounds()
        desired = None if asked is None else clamp_target(asked, bounds)
        if asked is not None and asked not in (desired, self._refused):  # once per such count
            log.warning(
                "executors: %d asked for, outside spec.scaling's %d..%d: running %s",
                asked,
                *bounds,
                desired,
            )
        self._refused = asked if desired != asked else None
        released: list[str] = []
        if desired is not None:
            before = self.control.target
            released = self.control.set_target(desired)  # it may hold a floor (executors.py)
            if self.control.target != before or released:
                log.info(
                    "executors: target %d -> %d%s",
                    before,
                    self.control.target,
                    f", released idle {', '.join(released)}" if released else "",
                )
        totals = self.control.totals()
        now = time.time()
        self.load.sample(now, totals.busy_core_seconds)
        self.start_clock.observe(
            now, self.control.target, len(totals.registered), totals.newest_added_at
        )
        with self._lock:
            capacity = self.meter.capacity()
            batch, batch_at = self._last_batch, self._last_batch_at
            kafka = self._kafka
        report = driver_report(
            at=now,
            query_id=self.query_id,
            run_id=self._run_id,
            last_batch=batch,
            last_batch_at=batch_at,
            target=self.control.target,
            totals=totals,
            released=self.control.released,
            capacity=capacity,
            executor_start_seconds=self.start_clock.seconds,
            kafka=kafka,
            freshness=None if self.freshness is None else self.freshness(now),
            cost=None if self.cost is None else self.cost(now),
            busy_cores=self.load.cores(),
            group_commit_problem=self.group_commit_problem() if self.group_commit_problem else "",
        )
        # Publish on change, else as a heartbeat: the operator treats a report older than 30 s
        # as a driver that stopped reporting. Keeps the API server's load per stream low: a
        # Kafka poll that saw nothing move is not a change.
        # The cost and load move with every sample: they ride on the other changes and the
        # heartbeat.
        content = {k: v for k, v in report.items() if k not in ("at", "cost", "busyCores")}
        if kafka is not None:
            content["kafka"] = {k: v for k, v in kafka.items() if k != "at"}
        if content != self._published or time.monotonic() - self._published_at >= HEARTBEAT_SECONDS:
            self.channel.publish(report)
            self._published, self._published_at = content, time.monotonic()
        return report

    def run(self, done: threading.Event) -> None:
        """Rounds until ``done``; errors are logged, never raised into the stream."""
        while not done.is_set():
            try:
                self.step()
            except Exception as error:
                log.warning("autoscaling round failed (executors kept as they are): %s", error)
            done.wait(self.period)


def driver_report(
    *,
    at: float,
    query_id: str,
    run_id: str,
    last_batch: int,
    last_batch_at: float | None,
    target: int,
    totals: ExecutorTotals,
    released: int,
    capacity: MeasuredCapacity | None,
    executor_start_seconds: float | None,
    kafka: dict[str, Any] | None,
    freshness: dict[str, Any] | None = None,
    cost: dict[str, Any] | None = None,
    busy_cores: float | None = None,
    group_commit_problem: str = "",
) -> dict[str, Any]:
    """The report the driver publishes on its pod (the operator's autoscaler and Ready read
    it; deltaflow_operator.autoscaler.observe parses it)."""
    report: dict[str, Any] = {
        "at": round(at, 3),
        "queryId": query_id,
        "runId": run_id,
        "lastBatch": last_batch,
        "lastBatchAt": None if last_batch_at is None else round(last_batch_at, 3),
        "target": target,
        "registered": len(totals.registered),
        "cores": totals.cores,
        "released": released,
        "failedTasks": totals.failed_tasks,
    }
    if capacity is not None:
        report["capacity"] = {
            "recordsPerCoreSecond": round(capacity.records_per_core_second, 3),
            "batchOverheadSeconds": round(capacity.batch_overhead_seconds, 3),
            "batches": capacity.batches,
            "fitted": capacity.fitted,
        }
        if executor_start_seconds is not None:
            report["capacity"]["executorStartSeconds"] = round(executor_start_seconds, 1)
    if kafka is not None:
        report["kafka"] = kafka
    if freshness is not None:
        report["freshness"] = freshness
    if cost is not None:
        report["cost"] = cost
    if busy_cores is not None:
        report["busyCores"] = round(busy_cores, 4)
    if group_commit_problem:
        report["groupCommit"] = {"error": group_commit_problem}  # bounded where it is made
    return report


def kafka_report(at: float, end: TopicOffsets, committed: TopicOffsets) -> dict[str, Any]:
    """The report's ``kafka`` part: when, log-end and committed offsets as {topic: {"p": n}}.

    Offsets of more partitions than fit the report (annotations share 256 KiB per pod) become
    an error the operator shows: the executor count is then held, never set from partial lag.
    """

    def plain(offsets: TopicOffsets) -> dict[str, dict[str, int]]:
        return {t: {str(p): o for p, o in sorted(ps.items())} for t, ps in sorted(offsets.items())}

    part = {"at": round(at, 3), "end": plain(end), "committed": plain(committed)}
    if len(json.dumps(part, separators=(",", ":"))) > MAX_KAFKA_REPORT_BYTES:
        partitions = sum(len(ps) for ps in end.values())
        return {
            "at": round(at, 3),
            "error": f"{partitions} partitions are too many to report per partition (more than "
            f"{MAX_KAFKA_REPORT_BYTES // 1024} KiB of offsets): lag-based scaling is off for "
            "this stream; use scaling.mode: manual",
        }
    return part
