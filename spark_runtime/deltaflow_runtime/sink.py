"""The micro-batch writer (``foreachBatch``): exactly once into the table and the dead-letter table.

``foreachBatch`` alone is at-least-once: after a crash Spark replays the last planned batch. Every
write of a batch therefore carries ``txnAppId`` (stable per stream) and ``txnVersion`` (the batch
id), the dead-letter write included: Delta commits each at most once per table, and a replayed batch
finds its writes already there. Order of a batch: table, dead-letter table, then the consumer group
(monitoring only, after the Delta commits).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from deltaflow_operator.api.identity import StreamIdentity
from deltaflow_runtime.checkpoint import Checkpoint, TopicOffsets
from deltaflow_runtime.metrics import RuntimeMetrics
from deltaflow_runtime.offsets import KafkaAdmin
from deltaflow_runtime.parse import (
    REASONS,
    ParseSpec,
    count_columns,
    dead_letter_rows,
    only_records,
    route,
    routing_fingerprint,
    table_pass_columns,
    valid_rows,
)
from deltaflow_runtime.table import cached_version, commit_metadata, recorded_entry, table_state

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Observation, SparkSession

log = logging.getLogger("deltaflow.sink")


@dataclass
class BatchReport:
    """What one batch did (logged as one JSON line, and the source of the writer's metrics)."""

    batch_id: int
    outcome: str = "committed"  # committed | replayed (already in the table)
    rows: int | None = None
    written: int = 0
    dead_letters: dict[str, int] = field(default_factory=dict)
    table_version: int | None = None
    end_offsets: TopicOffsets | None = None
    seconds: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> str:
        """The log line."""
        body: dict[str, Any] = {
            "event": "batch_committed",
            "batch": self.batch_id,
            "outcome": self.outcome,
            "rows": self.rows,
            "written": self.written,
            "deadLettered": self.dead_letters,
            "tableVersion": self.table_version,
            "endOffsets": self.end_offsets,
            "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
            "committedAt": round(time.time(), 3),
        }
        return json.dumps(body, separators=(",", ":"))


# Up to this many refused records per batch, the dead-letter pass re-reads only those records
# (their keys come back with the table write's observation); above it, it re-routes the batch.
DEAD_KEYS_LIMIT = 50_000


@dataclass(frozen=True)
class Counts:
    """What an observed write saw."""

    rows: int
    valid: int
    reasons: dict[str, int]
    dead_keys: list[tuple[str, int, int]] | None = None

    @classmethod
    def of(cls, observed: Mapping[str, Any]) -> Counts:
        """From an observation's metrics."""
        reasons = {r.value: int(observed.get(r.value) or 0) for r in REASONS}
        keys = observed.get("dead_keys")
        return cls(
            rows=int(observed["rows"]),
            valid=int(observed["valid"]),
            reasons={k: v for k, v in reasons.items() if v},
            dead_keys=None if keys is None else [(k[0], int(k[1]), int(k[2])) for k in keys],
        )


class DuplicateWriterError(RuntimeError):
    """Another process committed this stream's batch: two drivers run the same stream."""


class RoutingChangedError(RuntimeError):
    """A replayed batch's table rows were routed by another spec (or runtime) than this one."""


def _observed(observation: Observation, timeout: float) -> dict[str, Any] | None:
    """The observation's metrics once the observed write ran (None if it never did, e.g. when
    Delta skipped the write as already committed). Spark reports metrics through its listener
    bus just after the action returns, hence the short wait."""
    jo: Any = observation._jo
    deadline = time.monotonic() + timeout
    while not jo.future().isCompleted():
        if time.monotonic() > deadline:
            return None
        time.sleep(0.01)
    return observation.get


class BatchWriter:
    """The ``foreachBatch`` function of one stream.

    Which batches the table already holds is read once at start (``table_batch``, from the
    Delta log): Spark replays at most the batch that was in flight when the previous driver
    died, and within one run this writer is the stream's only writer, so later batches need no
    look-up (Delta's own txn check still guards every write).
    """

    def __init__(
        self,
        *,
        spark: SparkSession,
        stream: StreamIdentity,
        spec: ParseSpec,
        partition_by: list[str],
        checkpoint: Checkpoint,
        admin: KafkaAdmin,
        metrics: RuntimeMetrics,
        table_batch: int | None,
        observation_timeout: float = 60.0,
    ) -> None:
        self.spark = spark
        self.stream = stream
        self.spec = spec
        self.partition_by = partition_by
        self.checkpoint = checkpoint
        self.admin = admin
        self.metrics = metrics
        self.table_batch = -1 if table_batch is None else table_batch
        self.replayable = self.table_batch  # batches up to here may be replays of a dead driver's
        # Read from the dead-letter table's log only if a replay needs it (see _dead_letter_batch).
        self.dead_letter_batch: int | None = None
        self.observation_timeout = observation_timeout
        self._lock = threading.Lock()
        self._committed: TopicOffsets = {}
        self.last_report: BatchReport | None = None
        self.routing = routing_fingerprint(spec)

    @property
    def committed_offsets(self) -> TopicOffsets:
        """End offsets of the last batch this process committed (or found committed)."""
        with self._lock:
            return {t: dict(ps) for t, ps in self._committed.items()}

    def seed_committed(self, offsets: TopicOffsets | None) -> None:
        """Where the stream resumes, before its first batch (for lag at start)."""
        if offsets:
            with self._lock:
                self._committed = {t: dict(ps) for t, ps in offsets.items()}

    def _append(
        self,
        frame: DataFrame,
        observation: Observation,
        path: str,
        *,
        batch_id: int,
        metadata: str,
        partition_by: list[str],
    ) -> Counts:
        writer = (
            frame.write.format("delta")
            .mode("append")
            .option("txnAppId", self.stream.txn_app_id)
            .option("txnVersion", str(batch_id))
            .option("userMetadata", metadata)
            # A field added to the spec's schema becomes a new column; incompatible changes fail.
            .option("mergeSchema", "true")
        )
        if partition_by:
            writer = writer.partitionBy(*partition_by)
        writer.save(path)
        observed = _observed(observation, self.observation_timeout)
        if observed is None:
            state = table_state(self.spark, path, self.stream.txn_app_id)
            if state.stream_batch is not None and state.stream_batch >= batch_id:
                raise DuplicateWriterError(
                    f"batch {batch_id} of {self.stream.txn_app_id} was committed to {path} by "
                    "another process while this driver ran it: two drivers run this stream. "
                    "Delta kept the table exactly-once; this driver stops."
                )
            raise RuntimeError(f"the write of batch {batch_id} to {path} reported no metrics")
        return Counts.of(observed)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        """Write one micro-batch (Spark calls this; a replayed batch is written at most once)."""
        from pyspark.sql import Observation

        report = BatchReport(batch_id)
        clock = time.monotonic()
        report.end_offsets = self.checkpoint.end_offsets(batch_id)
        metadata = commit_metadata(
            self.stream.txn_app_id, batch_id, report.end_offsets, self.routing
        )
        routed = route(batch, self.spec)
        report.seconds["prepare"] = time.monotonic() - clock

        clock = time.monotonic()
        counts: Counts | None = None
        if batch_id <= self.table_batch:
            # Replay after a crash between the Delta commit and the checkpoint commit.
            report.outcome = "replayed"
        else:
            # The observation counts the rows and collects the refused records' keys during the
            # one write, and stops the optimizer from pushing the validity filter into (and
            # re-running) the parse.
            observation = Observation()
            observed = routed.observe(observation, *table_pass_columns())
            rows = valid_rows(observed, self.spec)
            counts = self._append(
                rows,
                observation,
                self.stream.table_path,
                batch_id=batch_id,
                metadata=metadata,
                partition_by=self.partition_by,
            )
            self.table_batch = batch_id
            report.rows, report.written = counts.rows, counts.valid
        report.seconds["write_table"] = time.monotonic() - clock

        clock = time.monotonic()
        if (counts is None or counts.rows != counts.valid) and not self._dead_letters_hold(
            batch_id
        ):
            if counts is None:
                self._check_replay_routing(batch_id)
            dead_routed = routed
            keys = counts.dead_keys if counts is not None else None
            if keys is not None and len(keys) <= DEAD_KEYS_LIMIT:
                # Parse again only the refused records, not the whole batch.
                dead_routed = route(only_records(batch, keys), self.spec)
            observation = Observation()
            frame = dead_letter_rows(
                dead_routed.observe(observation, *count_columns()), self.spec, batch_id
            )
            dead_counts = self._append(
                frame,
                observation,
                self.stream.dead_letter_table_path,
                batch_id=batch_id,
                metadata=metadata,
                partition_by=[],
            )
            if counts is None:
                report.rows = dead_counts.rows
            report.dead_letters = dead_counts.reasons
        report.seconds["write_dead_letter"] = time.monotonic() - clock

        clock = time.monotonic()
        if report.end_offsets is not None:
            with self._lock:
                self._committed = {t: dict(ps) for t, ps in report.end_offsets.items()}
            self._commit_group(report.end_offsets)
        report.seconds["commit_consumer_group"] = time.monotonic() - clock
        report.table_version = cached_version(self.spark, self.stream.table_path)
        self._record(report)

    def _dead_letters_hold(self, batch_id: int) -> bool:
        """Whether the dead-letter table already holds this batch. Only a replay of a batch the
        table already held at start can find them written (the table is written first), so the
        dead-letter log is read only for such a replay, once."""
        if batch_id > self.replayable:
            return False
        if self.dead_letter_batch is None:
            state = table_state(
                self.spark, self.stream.dead_letter_table_path, self.stream.txn_app_id
            )
            self.dead_letter_batch = -1 if state.stream_batch is None else state.stream_batch
        return batch_id <= self.dead_letter_batch

    def _check_replay_routing(self, batch_id: int) -> None:
        """Before writing the dead letters of a batch whose table rows an earlier driver
        committed: that driver must have routed as this one does, or a record would go to both
        tables (valid then, refused now) or to neither (the reverse)."""
        path = self.stream.table_path
        entry = recorded_entry(
            self.spark,
            path,
            self.stream.txn_app_id,
            batch_id,
            latest_version=cached_version(self.spark, path),
        )
        recorded = None if entry is None else entry.get("routing")
        if recorded == self.routing:
            return
        found = (
            "its commit was not found in the last 200 versions of the table's log"
            if entry is None
            else f"its commit records routing {recorded or '(none: an older runtime)'}"
        )
        raise RoutingChangedError(
            f"batch {batch_id} of {self.stream.txn_app_id} was written to {path} by an earlier "
            f"driver, which stopped before writing its dead letters; {found}, and this driver "
            f"routes as {self.routing} (spec.format, the schema or the runtime changed). "
            "Finishing it now could put a record in both tables or in neither. To proceed: run "
            "the previous spec and image until this one batch commits, then apply the change."
        )

    def _commit_group(self, offsets: TopicOffsets) -> None:
        group = self.stream.consumer_group
        for attempt in range(3):
            try:
                self.admin.commit_group_offsets(group, offsets)
                return
            except Exception as error:  # monitoring only: never fail a committed batch for it
                if attempt == 2:
                    self.metrics.group_commit_failures.inc()
                    log.warning("committing offsets to %s failed: %s", group, error)
                else:
                    time.sleep(0.5 * (attempt + 1))  # e.g. the group coordinator is loading

    def _record(self, report: BatchReport) -> None:
        m = self.metrics
        m.batches.labels(outcome=report.outcome).inc()
        if report.rows is not None:
            m.input_rows.inc(report.rows)
        m.rows_written.inc(report.written)
        for reason, n in report.dead_letters.items():
            m.dead_letter_rows.labels(reason=reason).inc(n)
        for phase, seconds in report.seconds.items():
            m.phase_seconds.labels(phase=phase).set(seconds)
        m.last_batch_id.set(report.batch_id)
        if report.table_version is not None:
            m.table_version.set(report.table_version)
        m.last_commit_time.set(time.time())
        self.last_report = report
        log.info("%s", report.to_json())
