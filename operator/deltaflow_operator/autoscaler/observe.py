"""Turn raw readings into the policy's observation (pure): the driver's report annotation, and
two Kafka offset snapshots (the driver reads them and puts them in its report) into lag,
arrival and consumption rates.

The operator and the driver talk through annotations on the driver pod (see
``deltaflow_runtime.pod_channel``, which holds the same names; a unit test checks they agree).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from deltaflow_operator.autoscaler.policy import Capacity, PartitionLag

DESIRED_ANNOTATION = "deltaflow.io/executors-desired"
REPORT_ANNOTATION = "deltaflow.io/driver-report"
# A report older than this says the driver stopped reporting (it publishes every 2 s).
REPORT_STALE_SECONDS = 30.0
# Rates are measured over at least this long: a reconcile right after another (a spec change)
# would otherwise divide a few records by a fraction of a second.
MIN_RATE_INTERVAL_SECONDS = 5.0

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class OffsetSnapshot:
    """Log-end and committed offsets of every partition, read at one time."""

    at: float
    end: dict[TopicPartition, int]
    committed: dict[TopicPartition, int]  # a partition the stream never committed is absent


@dataclass(frozen=True)
class DriverReport:
    """What the driver last published about its executors and capacity."""

    at: float
    query_id: str
    run_id: str
    target: int
    registered: int
    released: int
    failed_tasks: int
    capacity: Capacity | None
    # The last batch this driver committed, and when (None: none since it started).
    last_batch: int | None = None
    last_batch_at: float | None = None
    # The driver's last Kafka poll: the offsets it read, or why it could not read them.
    kafka: OffsetSnapshot | None = None
    kafka_error: str = ""

    def fresh(self, now: float) -> bool:
        """Published recently enough to act on."""
        return now - self.at <= REPORT_STALE_SECONDS


def parse_report(text: str | None) -> DriverReport | None:
    """The report annotation, or None when absent or not a report (never raises)."""
    if not text:
        return None
    try:
        raw = json.loads(text)
        cap = raw.get("capacity")
        capacity = (
            Capacity(
                records_per_core_second=float(cap["recordsPerCoreSecond"]),
                batch_overhead_seconds=float(cap["batchOverheadSeconds"]),
                batches=int(cap["batches"]),
                fitted=bool(cap.get("fitted", True)),
                executor_start_seconds=_seconds(cap.get("executorStartSeconds")),
            )
            if isinstance(cap, dict)
            else None
        )
        if capacity is not None and capacity.records_per_core_second <= 0:
            capacity = None
        return DriverReport(
            at=float(raw["at"]),
            query_id=str(raw.get("queryId", "")),
            run_id=str(raw.get("runId", "")),
            target=int(raw["target"]),
            registered=int(raw["registered"]),
            released=int(raw.get("released", 0)),
            failed_tasks=int(raw.get("failedTasks", 0)),
            capacity=capacity,
            last_batch=None if raw.get("lastBatch") is None else int(raw["lastBatch"]),
            last_batch_at=None if raw.get("lastBatchAt") is None else float(raw["lastBatchAt"]),
            kafka=_snapshot(raw.get("kafka")),
            kafka_error=str((raw.get("kafka") or {}).get("error") or ""),
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _seconds(raw: object) -> float | None:
    """A duration from the report: absent or not a non-negative number is unknown."""
    if isinstance(raw, bool) or not isinstance(raw, int | float) or raw < 0:
        return None
    return float(raw)


def _snapshot(raw: object) -> OffsetSnapshot | None:
    """The report's ``kafka`` part: {"at", "end": {topic: {partition: offset}}, "committed"}."""
    if not isinstance(raw, dict) or "end" not in raw:
        return None

    def offsets(part: object) -> dict[TopicPartition, int]:
        if not isinstance(part, dict):
            raise TypeError("offsets must be {topic: {partition: offset}}")
        return {(str(t), int(p)): int(o) for t, ps in part.items() for p, o in ps.items()}

    return OffsetSnapshot(
        at=float(raw["at"]), end=offsets(raw["end"]), committed=offsets(raw.get("committed", {}))
    )


def desired_annotation(pod: dict[str, object] | None) -> int | None:
    """The count the operator last asked this driver pod for."""
    meta = (pod or {}).get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    value = annotations.get(DESIRED_ANNOTATION) if isinstance(annotations, dict) else None
    try:
        return int(value) if isinstance(value, str) else None
    except ValueError:
        return None


@dataclass(frozen=True)
class KafkaView:
    """Lag and rates from two snapshots; rates are None until two snapshots exist."""

    partitions: tuple[PartitionLag, ...] | None  # None: a partition's position is unknown
    consumption_rate: float | None
    arrival_rate: float | None


def kafka_view(previous: OffsetSnapshot | None, current: OffsetSnapshot) -> KafkaView:
    """Per-partition lag and arrival rate, and the stream's consumption rate."""
    dt = current.at - previous.at if previous is not None else 0.0
    measured = previous is not None and dt > 0
    lags: list[PartitionLag] = []
    for tp, end in sorted(current.end.items()):
        committed = current.committed.get(tp)
        if committed is None:
            return KafkaView(None, None, None)
        rate = None
        if measured and previous is not None and tp in previous.end:
            rate = max(0, end - previous.end[tp]) / dt
        lags.append(PartitionLag(tp[0], tp[1], max(0, end - committed), rate))
    consumption = arrival = None
    if measured and previous is not None:
        moved = sum(
            max(0, c - previous.committed[tp])
            for tp, c in current.committed.items()
            if tp in previous.committed
        )
        consumption = moved / dt
        rates = [p.arrival_rate for p in lags if p.arrival_rate is not None]
        arrival = sum(rates) if rates else None
    return KafkaView(tuple(lags), consumption, arrival)


def with_rates(
    partitions: tuple[PartitionLag, ...] | None, measured: tuple[PartitionLag, ...] | None
) -> tuple[PartitionLag, ...] | None:
    """``partitions`` (fresh lag) with the arrival rates last measured for each partition."""
    if partitions is None:
        return None
    rates = {(p.topic, p.partition): p.arrival_rate for p in measured or ()}
    return tuple(
        PartitionLag(p.topic, p.partition, p.lag, rates.get((p.topic, p.partition)))
        for p in partitions
    )
