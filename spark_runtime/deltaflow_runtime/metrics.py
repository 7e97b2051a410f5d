"""Prometheus metrics of the driver: throughput, batch timings, rows written and dead-lettered,
Kafka lag and retention headroom per partition, last committed batch and table version.

Names are prefixed ``deltaflow_``. Sources: Spark's progress reports (rates, durations), the batch
writer (rows, reasons, commits) and a background Kafka poll (lag, retention headroom).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from deltaflow_runtime.checkpoint import TopicOffsets
from deltaflow_runtime.parse import REASONS

DEFAULT_METRICS_PORT = 8090

# Spark's durationMs parts of a micro-batch (see StreamingQueryProgress.durationMs).
SPARK_PHASES = (
    "latestOffset",
    "getBatch",
    "queryPlanning",
    "walCommit",
    "addBatch",
    "commitOffsets",
    "triggerExecution",
)


@dataclass(frozen=True)
class ProgressSample:
    """The numbers the metrics take from one Spark progress report."""

    batch_id: int
    input_rows: int
    input_rows_per_second: float
    processed_rows_per_second: float
    durations_ms: dict[str, int] = field(default_factory=dict)

    def scaled(self, records: int) -> ProgressSample:
        """The same report with the rates recomputed for ``records`` records (Spark counts
        rows per source read)."""
        if self.input_rows <= 0:
            return self
        factor = records / self.input_rows
        return ProgressSample(
            batch_id=self.batch_id,
            input_rows=records,
            input_rows_per_second=self.input_rows_per_second * factor,
            processed_rows_per_second=self.processed_rows_per_second * factor,
            durations_ms=dict(self.durations_ms),
        )


def progress_sample(progress: Mapping[str, Any]) -> ProgressSample:
    """Extract a :class:`ProgressSample` from a StreamingQueryProgress (as a dict)."""

    def number(key: str) -> float:
        value = progress.get(key)
        return float(value) if isinstance(value, int | float) else 0.0

    durations = progress.get("durationMs") or {}
    return ProgressSample(
        batch_id=int(progress.get("batchId", -1)),
        input_rows=int(progress.get("numInputRows", 0)),
        input_rows_per_second=number("inputRowsPerSecond"),
        processed_rows_per_second=number("processedRowsPerSecond"),
        durations_ms={k: int(v) for k, v in durations.items() if k in SPARK_PHASES},
    )


class RuntimeMetrics:
    """Every metric of one stream, in its own registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self._partitions_seen: set[tuple[str, str]] = set()
        r = self.registry
        self.info = Gauge(
            "deltaflow_stream_info",
            "The stream this driver runs (value 1).",
            ["txn_app_id", "consumer_group", "table"],
            registry=r,
        )
        self.input_rows_per_second = Gauge(
            "deltaflow_input_rows_per_second",
            "Rate at which records arrived, last batch.",
            registry=r,
        )
        self.processed_rows_per_second = Gauge(
            "deltaflow_processed_rows_per_second",
            "Rate at which records were processed, last batch.",
            registry=r,
        )
        self.batch_duration = Histogram(
            "deltaflow_batch_duration_seconds",
            "Wall time of each micro-batch (Spark triggerExecution).",
            buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
            registry=r,
        )
        self.phase_seconds = Gauge(
            "deltaflow_batch_phase_seconds",
            "Parts of the last micro-batch: Spark's durationMs and the writer's own steps.",
            ["phase"],
            registry=r,
        )
        self.input_rows = Counter(
            "deltaflow_input_rows", "Records read from Kafka and routed.", registry=r
        )
        self.rows_written = Counter(
            "deltaflow_rows_written", "Rows appended to the table.", registry=r
        )
        self.dead_letter_rows = Counter(
            "deltaflow_dead_letter_rows",
            "Records written to the dead-letter table, by reason.",
            ["reason"],
            registry=r,
        )
        for reason in REASONS:
            self.dead_letter_rows.labels(reason=reason.value)
        self.vanished_records = Counter(
            "deltaflow_vanished_records",
            "Records of a committed batch that Kafka no longer held when the batch was read again "
            "for its dead letters (compacted, or deleted by retention), by what they had been: "
            "valid ones are in the table; refused ones could not be copied to the dead-letter "
            "table.",
            ["kind"],
            registry=r,
        )
        self.dead_letters_pending = Gauge(
            "deltaflow_dead_letters_pending",
            "Refused records whose table batch is committed and whose dead-letter commit is "
            "still to come (committed together within a minute, once caught up, and at stop).",
            registry=r,
        )
        self.batches = Counter(
            "deltaflow_batches",
            "Micro-batches by outcome (committed, or replayed after a restart and already in the "
            "table).",
            ["outcome"],
            registry=r,
        )
        self.last_batch_id = Gauge(
            "deltaflow_last_committed_batch_id", "Last batch committed to the table.", registry=r
        )
        self.table_version = Gauge(
            "deltaflow_table_version", "Delta table version after the last batch.", registry=r
        )
        self.last_commit_time = Gauge(
            "deltaflow_last_commit_timestamp_seconds",
            "Unix time of the last batch commit.",
            registry=r,
        )
        self.record_age = Gauge(
            "deltaflow_record_age_at_commit_seconds",
            "The last committed batch's oldest and newest record's age at the Delta commit "
            "(commit time minus the Kafka timestamp): its freshness.",
            ["record"],
            registry=r,
        )
        self.trigger_interval = Gauge(
            "deltaflow_trigger_interval_seconds",
            "The trigger interval the stream runs (from spec.freshness, or trigger.interval).",
            registry=r,
        )
        self.group_commit_failures = Counter(
            "deltaflow_consumer_group_commit_failures",
            "Failed commits of end offsets to the stream's consumer group (monitoring only).",
            registry=r,
        )
        labels = ["topic", "partition"]
        self.lag = Gauge(
            "deltaflow_kafka_lag_records",
            "Log-end offset minus the stream's committed offset.",
            labels,
            registry=r,
        )
        self.lag_total = Gauge(
            "deltaflow_kafka_lag_records_sum",
            "Sum of the lag over all partitions.",
            registry=r,
        )
        self.committed_offset = Gauge(
            "deltaflow_kafka_committed_offset",
            "Next offset the stream reads (end of the last committed batch).",
            labels,
            registry=r,
        )
        self.earliest_offset = Gauge(
            "deltaflow_kafka_earliest_offset",
            "Earliest offset Kafka retains.",
            labels,
            registry=r,
        )
        self.latest_offset = Gauge(
            "deltaflow_kafka_latest_offset", "Log-end offset.", labels, registry=r
        )
        self.headroom = Gauge(
            "deltaflow_kafka_retention_headroom_records",
            "Committed offset minus earliest retained offset: how many records retention may "
            "still delete before it deletes unread ones (<= 0: data loss).",
            labels,
            registry=r,
        )
        self.headroom_ratio = Gauge(
            "deltaflow_kafka_retention_headroom_ratio",
            "Headroom as a fraction of the retained log (0: retention is at the stream's read "
            "position).",
            labels,
            registry=r,
        )

    def serve(self, port: int) -> None:
        """Expose /metrics on ``port`` (all interfaces, for the driver's Service)."""
        start_http_server(port, registry=self.registry)

    def observe_progress(self, sample: ProgressSample) -> None:
        """Record one Spark progress report."""
        self.input_rows_per_second.set(sample.input_rows_per_second)
        self.processed_rows_per_second.set(sample.processed_rows_per_second)
        for phase, ms in sample.durations_ms.items():
            self.phase_seconds.labels(phase=phase).set(ms / 1000)
        if "triggerExecution" in sample.durations_ms and sample.input_rows > 0:
            self.batch_duration.observe(sample.durations_ms["triggerExecution"] / 1000)

    def observe_offsets(
        self, committed: TopicOffsets, earliest: TopicOffsets, latest: TopicOffsets
    ) -> None:
        """Record committed, earliest and latest offsets and what follows from them; the series
        of a partition no longer read (a topic deleted, or no longer matching the pattern) go."""
        per_partition = (
            self.latest_offset,
            self.earliest_offset,
            self.committed_offset,
            self.lag,
            self.headroom,
            self.headroom_ratio,
        )
        current = {(t, str(p)) for t, parts in latest.items() for p in parts}
        for gone in self._partitions_seen - current:
            for metric in per_partition:
                with contextlib.suppress(KeyError):
                    metric.remove(*gone)
        self._partitions_seen = current
        total = 0
        for topic, parts in latest.items():
            for partition, end in parts.items():
                p = str(partition)
                self.latest_offset.labels(topic, p).set(end)
                first = earliest.get(topic, {}).get(partition)
                if first is not None:
                    self.earliest_offset.labels(topic, p).set(first)
                done = committed.get(topic, {}).get(partition)
                if done is None:
                    done = first  # not read yet: a new stream starts at the earliest retained
                if done is None:
                    continue
                self.committed_offset.labels(topic, p).set(done)
                lag = max(0, end - done)
                total += lag
                self.lag.labels(topic, p).set(lag)
                if first is not None:
                    self.headroom.labels(topic, p).set(done - first)
                    retained = end - first
                    self.headroom_ratio.labels(topic, p).set(
                        (done - first) / retained if retained > 0 else 1.0
                    )
        self.lag_total.set(total)


class StreamRegistries(Collector):
    """A stream pool's metrics: every member's own registry, each series labelled
    ``stream="<namespace>/<name>"``, behind the pool's one endpoint."""

    LABEL = "stream"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._members: dict[str, CollectorRegistry] = {}

    def set(self, key: str, metrics: RuntimeMetrics | None) -> None:
        """The member ``key``'s metrics from now on (None: the member is gone)."""
        with self._lock:
            if metrics is None:
                self._members.pop(key, None)
            else:
                self._members[key] = metrics.registry

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            members = sorted(self._members.items())
        merged: dict[str, Metric] = {}
        for key, registry in members:
            for family in registry.collect():
                out = merged.get(family.name)
                if out is None:
                    out = merged[family.name] = Metric(
                        family.name, family.documentation, family.type, family.unit
                    )
                for sample in family.samples:
                    labels = {**sample.labels, self.LABEL: key}
                    out.add_sample(sample.name, labels, sample.value, sample.timestamp)
        yield from merged.values()

    def serve(self, port: int) -> None:
        """Expose every member's series on ``port`` (all interfaces, for the pod's Service)."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        start_http_server(port, registry=registry)
