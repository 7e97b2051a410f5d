"""The micro-batch writer (``foreachBatch``): exactly once into the table and the dead-letter table.

``foreachBatch`` alone is at-least-once: after a crash Spark replays the last planned batch. Every
write of a batch therefore carries ``txnAppId`` (stable per stream) and ``txnVersion`` (the batch
id), the dead-letter write included: Delta commits each at most once per table, and a replayed batch
finds its writes already there. Order of a batch: table, dead-letter table, then the consumer group
(monitoring only, after the Delta commits). Dead letters collected inline may wait in the driver
and share a later dead-letter commit, whose ``txnVersion`` is the table's last batch it covers;
each table commit records what start-up needs to write them should the driver die first.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from deltaflow_api.failures import FailureReason
from deltaflow_api.identity import StreamIdentity
from deltaflow_runtime.checkpoint import Checkpoint, TopicOffsets
from deltaflow_runtime.dead_letters import DeadLetterLedger
from deltaflow_runtime.errors import DeltaflowError
from deltaflow_runtime.jvm import observation_handle
from deltaflow_runtime.kafka_admin import KafkaIdentity
from deltaflow_runtime.kafka_preflight import group_commit_problem
from deltaflow_runtime.metrics import RuntimeMetrics
from deltaflow_runtime.offsets import KafkaAdmin
from deltaflow_runtime.parse import (
    BATCH,
    NEWEST_MS,
    OLDEST_MS,
    REASON,
    REASONS,
    REFUSED_KEYS,
    REFUSED_ROWS,
    ParseSpec,
    Router,
    count_columns,
    dead_letter_rows,
    inline_capacity,
    inline_dead_letters,
    inline_schema,
    possibly_refused,
    routing_fingerprint,
)
from deltaflow_runtime.table import (
    PENDING_DEAD_LETTERS,
    RECOVERING_DEAD_LETTERS,
    SNAPSHOT_PARTITIONS,
    START_OFFSETS,
    WRITTEN_ROWS,
    append_stream_batch,
    cached_version,
    commit_metadata,
    entry_offsets,
    known_files,
    recorded_entry,
    snapshot_partitions,
    table_state,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import Column, DataFrame, Observation, SparkSession
    from pyspark.sql.types import StructType

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
    # Where the dead letters came from: "inline" (collected by the table pass) or "kafka" (read
    # again); None when the batch had none.
    dead_letter_source: str | None = None
    # Dead letters of this batch left waiting in the driver for a later dead-letter commit.
    dead_letters_pending: int = 0
    # When its rows' table commit happened (epoch seconds), and its oldest and newest Kafka
    # timestamps (epoch ms): the batch's freshness. None for a replayed batch.
    committed_at: float | None = None
    oldest_ms: int | None = None
    newest_ms: int | None = None
    # Its table commit was one Delta checkpoints the log at (a slower batch, see cadence).
    log_checkpoint: bool = False

    def to_json(self) -> str:
        """The log line."""
        body: dict[str, Any] = {
            "event": "batch_committed",
            "batch": self.batch_id,
            "outcome": self.outcome,
            "rows": self.rows,
            "written": self.written,
            "deadLettered": self.dead_letters,
            "deadLetterSource": self.dead_letter_source,
            "deadLettersPending": self.dead_letters_pending,
            "tableVersion": self.table_version,
            "endOffsets": self.end_offsets,
            "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
            "committedAt": round(time.time(), 3),
        }
        if self.committed_at is not None and self.oldest_ms is not None:
            # The batch's freshness: its oldest and newest record's age at the table commit.
            body["ageSeconds"] = {
                "oldest": round(self.committed_at - self.oldest_ms / 1000, 3),
                "newest": round(self.committed_at - (self.newest_ms or self.oldest_ms) / 1000, 3),
            }
        if self.log_checkpoint:
            body["logCheckpoint"] = True
        return json.dumps(body, separators=(",", ":"))


@dataclass(frozen=True)
class Counts:
    """What an observed write saw."""

    rows: int
    valid: int
    reasons: dict[str, int]
    refused_keys: bytes | None = None  # the table pass's Bloom filter of refused records' keys
    refused_rows: tuple[Any, ...] = ()  # the refused records it collected inline (if any)
    oldest_ms: int | None = None  # the batch's oldest and newest Kafka timestamps (epoch ms)
    newest_ms: int | None = None
    log_checkpoint: bool = False  # the commit was one Delta checkpoints the log at

    @classmethod
    def of(cls, observed: Mapping[str, Any]) -> Counts:
        """From an observation's metrics (see :func:`deltaflow_runtime.parse.count_columns` and
        :func:`deltaflow_runtime.parse.table_pass_columns`)."""
        reasons = {r.value: int(observed.get(r.value) or 0) for r in REASONS}
        keys = observed.get(REFUSED_KEYS)
        return cls(
            rows=int(observed["rows"]),
            valid=int(observed["valid"]),
            reasons={k: v for k, v in reasons.items() if v},
            refused_keys=None if keys is None else bytes(keys),
            refused_rows=tuple(observed.get(REFUSED_ROWS) or ()),
            oldest_ms=_optional_int(observed.get(OLDEST_MS)),
            newest_ms=_optional_int(observed.get(NEWEST_MS)),
        )

    @property
    def refused(self) -> int:
        """Rows with a reason: the batch's dead letters."""
        return self.rows - self.valid

    @property
    def all_refused_inline(self) -> bool:
        """Whether the table pass collected every refused record (none too many or too large)."""
        return 0 < self.refused == len(self.refused_rows)


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


RECENT_REPORTS = 16

# Dead letters collected inline wait in the driver and are committed together, at most this
# long after the first of them (sooner once the stream has caught up with Kafka, and at stop;
# see stream.StreamRunner._flush_due): a dead-letter commit per batch cost more than the
# rest of a 500k-record batch's own work over the minimal job (bench/README). The rows waiting
# are bounded like one batch's inline collect (parse.inline_capacity(1)).
DEAD_LETTER_FLUSH_SECONDS = 60.0

# A batch writes one file per write task and table partition. Small batches (the steady state)
# are written by fewer tasks, about this many records each, so a batch of 25k records over 4 Kafka
# partitions writes 1 file per table partition instead of 4; large batches (catch-up) keep the
# read's tasks (one per Kafka partition, or minPartitions).
RECORDS_PER_WRITE_TASK = 100_000


def read_tasks(kafka_partitions: int, min_partitions: int | None) -> int:
    """About how many tasks read a batch: one per Kafka partition, or minPartitions when that is
    more (Spark splits partitions' ranges then; its rounding may differ by a few)."""
    return max(kafka_partitions, min_partitions or 0)


def write_tasks(planned_records: int | None, read_tasks: int) -> int | None:
    """How many tasks write a batch of ``planned_records`` read by ``read_tasks`` tasks (one per
    Kafka partition, or minPartitions); None: as many as read it (no change)."""
    if planned_records is None or read_tasks <= 1:
        return None
    tasks = max(1, -(-planned_records // RECORDS_PER_WRITE_TASK))
    return tasks if tasks < read_tasks else None


def inline_rows(last_refused: int, tasks: int) -> int:
    """How many refused records the table pass of a batch read by ``tasks`` tasks collects
    inline (see :func:`deltaflow_runtime.parse.inline_capacity`): none when the last batch
    refused more than that. Refused records come in runs (a bad producer, a wrong schema), and
    a collect that cannot hold them all is thrown away for the second read: its bounded heap
    in every task would be spent for nothing. The batch after one with few refused collects
    again."""
    capacity = inline_capacity(tasks)
    return 0 if last_refused > capacity else capacity


def batch_start(previous_end: TopicOffsets, end: TopicOffsets | None) -> TopicOffsets | None:
    """Where the batch ending at ``end`` starts: the previous batch's end (or where the run
    resumed) for each of its partitions; None when any of them is not known there (the first
    batch of a new stream, a partition added since)."""
    if end is None or not previous_end:
        return None
    start: TopicOffsets = {}
    for topic, parts in end.items():
        for partition in parts:
            begin = previous_end.get(topic, {}).get(partition)
            if begin is None:
                return None
            start.setdefault(topic, {})[partition] = begin
    return start


class DuplicateWriterError(DeltaflowError):
    """Another process committed this stream's batch: two drivers run the same stream."""

    reason = FailureReason.DUPLICATE_WRITER


class RoutingChangedError(DeltaflowError):
    """A replayed batch's table rows were routed by another spec (or runtime) than this one."""

    reason = FailureReason.ROUTING_CHANGED


def records_between(start: TopicOffsets, end: TopicOffsets) -> int:
    """Offsets from ``start`` (inclusive) to ``end`` (exclusive) over all partitions: the most
    records the range can hold (fewer after compaction or with transaction markers)."""
    return sum(
        max(0, offset - start.get(topic, {}).get(partition, offset))
        for topic, parts in end.items()
        for partition, offset in parts.items()
    )


class DeadLettersLostError(DeltaflowError):
    """Dead letters a stopped driver left uncommitted cannot be read again (their table commit
    no longer records where they are)."""


class BatchMismatchError(DeltaflowError):
    """The two writes of a batch did not see the same records (table rows + dead letters differ
    from the records read): the batch is not committed and the stream stops."""

    reason = FailureReason.BATCH_MISMATCH


# The thread-local property naming the FAIR scheduler pool of the jobs a thread starts.
SCHEDULER_POOL = "spark.scheduler.pool"

# Raised inside foreachBatch: they reach the command wrapped in Spark's StreamingQueryException,
# which names them in its text (errors.failure_reason).
BATCH_ERRORS: tuple[type[DeltaflowError], ...] = (
    RoutingChangedError,
    BatchMismatchError,
    DuplicateWriterError,
)


def _observed(observation: Observation, timeout: float) -> dict[str, Any] | None:
    """The observation's metrics once the observed write ran (None if it never did, e.g. when
    Delta skipped the write as already committed). Spark reports metrics through its listener
    bus just after the action returns, hence the short wait."""
    jo: Any = observation_handle(observation)
    deadline = time.monotonic() + timeout
    while not jo.future().isCompleted():
        if time.monotonic() > deadline:
            return None
        time.sleep(0.01)
    return observation.get


@dataclass(frozen=True)
class DeadLetterRecovery:
    """Dead letters a stopped driver left waiting, planned at start from the table's log: the
    Kafka range of each of ``batches`` to read again, the valid rows their table commits wrote
    (None: not recorded), and the ``version`` their one dead-letter commit goes under."""

    batches: tuple[tuple[int, TopicOffsets, TopicOffsets], ...]  # (batch id, start, end)
    written: int | None
    version: int
    read_range: Callable[[TopicOffsets, TopicOffsets], DataFrame]
    # An earlier run deferred it and committed a table batch without finishing it (a crash, or
    # a failure that would recur): written at start this time, so that a recovery that keeps
    # failing stops the start rather than letting the table move on a batch per restart.
    interrupted: bool = False

    @property
    def batch_ids(self) -> list[int]:
        """The batches whose dead letters it writes."""
        return [batch for batch, _, _ in self.batches]


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
        optimize_write: bool = False,
        checkpoint: Checkpoint,
        admin: KafkaAdmin,
        metrics: RuntimeMetrics,
        table_batch: int | None,
        dead_letter_batch: int | None = None,
        min_partitions: int | None = None,
        observation_timeout: float = 60.0,
        size_snapshot_partitions: bool = True,
        dead_letter_flush_seconds: float | None = None,
        scheduler_pool: str | None = None,
    ) -> None:
        self.spark = spark
        self.scheduler_pool = scheduler_pool
        self.stream = stream
        self.partition_by = partition_by
        self.optimize_write = optimize_write
        self.checkpoint = checkpoint
        self.admin = admin
        # Why the last group commit failed, when the principal may not use the group (the
        # driver's report carries it to the Degraded condition); "" once a commit succeeds.
        self.group_commit_problem = ""
        self._group_untried = True  # this process has not committed to the group yet
        # One commit to the group at a time, each sending the newest position: the poll round's
        # (sync_group) would otherwise land an older one over a batch's.
        self._group_lock = threading.Lock()
        self.metrics = metrics
        self.table_batch = -1 if table_batch is None else table_batch
        self.replayable = self.table_batch  # batches up to here may be replays of a dead driver's
        self.min_partitions = min_partitions  # Spark's Kafka minPartitions (None: not set)
        self.observation_timeout = observation_timeout
        # Size Delta's state reconstruction for each table written (False: the spec chose it).
        self.size_snapshot_partitions = size_snapshot_partitions
        self._lock = threading.Lock()
        self._committed: TopicOffsets = {}
        self.last_report: BatchReport | None = None
        # The last few batches' reports, for the progress listener (which runs behind).
        self.recent_reports: dict[int, BatchReport] = {}
        self.routing = routing_fingerprint(spec)
        self.router = Router(spec)  # the routing's columns, built once for every batch
        # Refused records of the last batch: the next table pass sizes its filter of refused
        # keys for twice as many (refused records come in runs: a bad producer, a wrong schema).
        self._last_refused = 0
        # Where the dead letters are, and under which version the next commit of waiting ones
        # may go (dead_letters.py). The lock makes "the table holds batch N" and "N's dead
        # letters wait or settle" one step, and a flush one step with its commit.
        self.ledger = DeadLetterLedger(
            table_batch=self.table_batch,
            committed_version=dead_letter_batch,
            flush_seconds=DEAD_LETTER_FLUSH_SECONDS
            if dead_letter_flush_seconds is None
            else dead_letter_flush_seconds,
            flush_rows=inline_capacity(1),
        )
        self._inline_schema: StructType | None = None
        self._flush_lock = threading.RLock()
        self._identity: KafkaIdentity | None = None
        # Planned at start, written before any other dead-letter commit (see plan_recovery).
        self.recovery: DeadLetterRecovery | None = None
        self.recovery_failures = 0  # attempts that failed (the Kafka poll tries only once)

    @property
    def dead_letter_batch(self) -> int | None:
        """The dead-letter table's last batch of this stream (the ledger's): as the start-up
        guard read it, then as this process committed; when not given at start, read from its
        log only if a replay needs it (see _dead_letters_hold)."""
        return self.ledger.committed_version

    @dead_letter_batch.setter
    def dead_letter_batch(self, version: int | None) -> None:
        self.ledger.committed_version = version

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
        options = {
            # Never Delta's: its shuffle would put the observation in a shuffle-map stage
            # (see parse.Router.by_table_partition, which does sink.optimizeWrite's instead).
            "optimizeWrite": "false",
            "txnAppId": self.stream.txn_app_id,
            "txnVersion": str(batch_id),
            "userMetadata": metadata,
            # A field added to the spec's schema becomes a new column; incompatible changes fail.
            "mergeSchema": "true",
        }
        if self.size_snapshot_partitions:
            # Per write: the table and the dead-letter table differ in size by orders, and the
            # setting is read by a state reconstruction in the batch's session (the commit's,
            # when the table's checksum cannot answer; its checkpoints).
            partitions = snapshot_partitions(known_files(self.spark, path))
            frame.sparkSession.conf.set(SNAPSHOT_PARTITIONS, str(partitions))
        appended = append_stream_batch(frame, path, options, partition_by)
        observed = _observed(observation, self.observation_timeout) if appended.written else None
        if observed is None:
            state = table_state(self.spark, path, self.stream.txn_app_id)
            if state.stream_batch is not None and state.stream_batch >= batch_id:
                raise DuplicateWriterError(
                    f"batch {batch_id} of {self.stream.txn_app_id} was committed to {path} by "
                    "another process while this driver ran it: two drivers run this stream. "
                    "Delta kept the table exactly-once; this driver stops."
                )
            raise RuntimeError(f"the write of batch {batch_id} to {path} reported no metrics")
        return replace(Counts.of(observed), log_checkpoint=appended.log_checkpoint)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        """Write one micro-batch (Spark calls this; a replayed batch is written at most once).

        A new batch is routed in one uncached pass that writes its valid rows to the table and
        observes its counts, a Bloom filter of its refused records' keys, and the refused
        records themselves as long as they are few and small (a bounded collect). When that
        collect holds all of them, they are the dead letters: no second read. Otherwise the
        dead-letter pass reads the batch again, routes just the records the filter selects
        (the refused ones and a few false positives), and cross-checks their count against
        the table pass's before committing: the dead letters are exactly the records the
        table pass refused, or the batch fails loudly. Kafka keeps a record immutable at its
        offset; what may change between the two reads is only whether it is still there
        (compaction; retention fails the read itself). The driver never holds more than a
        bounded number of records (``parse.inline_capacity``).
        """
        if self.scheduler_pool is not None:
            # Spark calls this on a callback thread of its own: its jobs take the member's
            # FAIR pool only if this thread names it (a local property is per thread).
            self.spark.sparkContext.setLocalProperty(SCHEDULER_POOL, self.scheduler_pool)
        report = BatchReport(batch_id)
        clock = time.monotonic()
        report.end_offsets = self.checkpoint.end_offsets(batch_id)
        start = batch_start(self.committed_offsets, report.end_offsets)
        with self._flush_lock:
            # A recovery not yet written is waiting too: a crash before it is written finds
            # its batches in this commit, as the next start's plan reads them.
            recovery = self.recovery
            recovering = recovery.batch_ids if recovery is not None else []
            pending = [*recovering, *(p.batch_id for p in self.ledger.waiting)]
        metadata = commit_metadata(
            self.stream.txn_app_id,
            batch_id,
            report.end_offsets,
            self.routing,
            start_offsets=start,
            pending_dead_letters=pending,
            recovering=None if recovery is None else recovery.version,
            kafka=self._kafka_identity(sorted(report.end_offsets or {})),
        )
        report.seconds["prepare"] = time.monotonic() - clock
        if batch_id <= self.table_batch:
            # Replay after a crash between a Delta commit and the checkpoint commit.
            report.outcome = "replayed"
            if not self._recovery_covers(batch_id) and not self._dead_letters_hold(batch_id):
                self._finish_replay(self.router.split(batch), batch_id, metadata, report)
        else:
            self._write_both(batch, batch_id, metadata, report, start)

        clock = time.monotonic()
        if report.end_offsets is not None:
            with self._lock:
                self._committed = {t: dict(ps) for t, ps in report.end_offsets.items()}
            self._commit_group(report.end_offsets)
        report.seconds["commit_consumer_group"] = time.monotonic() - clock
        report.table_version = cached_version(self.spark, self.stream.table_path)
        self._record(report)

    def _write_both(
        self,
        batch: DataFrame,
        batch_id: int,
        metadata: str,
        report: BatchReport,
        start: TopicOffsets | None,
    ) -> None:
        """A new batch: its valid rows to the table, then its refused ones to the dead-letter
        table, each counted, and the two counts checked against each other.

        The batch is not cached: reading Kafka again for the refused records (and routing only
        those the table pass's filter of refused keys picks) costs less than caching every
        batch, measured even at 0.2% refused records in every batch (bench/README).
        """
        from pyspark.sql import Observation

        clock = time.monotonic()
        end = report.end_offsets or {}
        # The Kafka source reads each Kafka partition in one Spark partition, or splits them into
        # about minPartitions (never fewer than one per Kafka partition).
        reading = read_tasks(sum(len(ps) for ps in end.values()), self.min_partitions)
        tasks = write_tasks(None if start is None else records_between(start, end), reading)
        observation = Observation()
        # The observation sits between the routing and the filter on its reason: Spark does not
        # push a filter through it, so the value is parsed once (pushed below the parse, the
        # filter would substitute the reason's expression and parse it again).
        split_rows = self.router.split(batch)
        if self.optimize_write:
            split_rows = self.router.by_table_partition(
                split_rows, self.partition_by, reading if self.partition_by else tasks or reading
            )
        observed = split_rows.observe(
            observation,
            *self.router.table_pass_columns(
                2 * self._last_refused, inline_rows(self._last_refused, reading)
            ),
        )
        table_rows = self.router.valid_rows(observed)
        if tasks is not None and not self.optimize_write:
            # A small batch: fewer, larger files. The whole pass (read, parse, write) runs in
            # these tasks; at this size the parse is a small part of the write.
            table_rows = table_rows.coalesce(tasks)
        counts = self._append(
            table_rows,
            observation,
            self.stream.table_path,
            batch_id=batch_id,
            metadata=metadata,
            partition_by=self.partition_by,
        )
        with self._flush_lock:
            self.table_batch = batch_id
            if counts.all_refused_inline:
                # Waits in the driver; its table commit (metadata) has what start-up needs to
                # read it again from Kafka should this driver die first.
                self._inline_schema = self._inline_schema or inline_schema(split_rows)
            self.ledger.table_committed(
                batch_id,
                refused=counts.refused,
                inline=counts.refused_rows if counts.all_refused_inline else None,
                now=time.monotonic(),
            )
        self._last_refused = counts.refused
        report.rows, report.written = counts.rows, counts.valid
        report.committed_at = time.time()
        report.oldest_ms, report.newest_ms = counts.oldest_ms, counts.newest_ms
        report.log_checkpoint = counts.log_checkpoint
        report.seconds["write_table"] = time.monotonic() - clock

        clock = time.monotonic()
        # After this batch's table commit (a restart's first commit does not wait for it), and
        # before any dead-letter commit of its own.
        self.recover_dead_letters()
        if counts.all_refused_inline:
            report.dead_letter_source = "inline"
            if start is None:
                self.flush_dead_letters()  # where it started is not recorded: commit it now
            elif not self.flush_dead_letters(due_only=True):
                report.dead_letters_pending = counts.refused
        elif counts.refused:
            from pyspark import StorageLevel

            report.dead_letter_source = "kafka"
            self.flush_dead_letters(upto=batch_id - 1)  # the earlier batches' first

            if counts.refused_keys is None:
                raise RuntimeError(
                    f"batch {batch_id}: the table pass refused {counts.refused} records but "
                    "observed none of their keys"
                )
            candidates = possibly_refused(batch, counts.refused_keys)
            # Cached (only the refused records): the count and the write read it once.
            dead_rows = self.router.refused(self.router.split(candidates)).persist(
                StorageLevel.MEMORY_AND_DISK
            )
            try:
                self._write_dead_letters(dead_rows, batch_id, metadata, counts, report)
            finally:
                dead_rows.unpersist()
        report.seconds["write_dead_letter"] = time.monotonic() - clock

    def _write_dead_letters(
        self,
        dead_rows: DataFrame,
        batch_id: int,
        metadata: str,
        counts: Counts,
        report: BatchReport,
    ) -> None:
        """The refused records of a new batch to the dead-letter table, counted first."""

        # The second read finds a subset of the refused records the table pass saw (a record
        # never changes at its offset, it can only be gone): fewer are records compacted or
        # deleted since, counted and written as found; more cannot be.
        before = dead_rows.count()
        if before > counts.refused:
            raise BatchMismatchError(
                f"batch {batch_id} of {self.stream.txn_app_id}: the table write found "
                f"{counts.refused} refused records of {counts.rows}, a second look at the "
                f"same offsets {before}. None of its dead letters is written; the stream stops "
                "and on restart finishes the batch only if Kafka gives the records the table "
                "write saw."
            )
        self._vanished(batch_id, valid=0, refused=counts.refused - before)
        dead = self._append_dead_letters(dead_rows, batch_id, metadata)
        if dead.rows != before:
            raise BatchMismatchError(
                f"batch {batch_id} of {self.stream.txn_app_id}: its dead-letter commit holds "
                f"{dead.rows} records where {before} were counted just before (the topic "
                "changed while the batch ran); the stream stops. Compare the batch's offsets in "
                "the table's commit metadata with the topic."
            )
        with self._flush_lock:
            self.ledger.settled(batch_id)
        report.dead_letters = dead.reasons

    def _append_dead_letters(
        self,
        dead_rows: DataFrame,
        batch_id: int,
        metadata: str,
        *,
        batch: Column | None = None,
    ) -> Counts:
        """Append refused rows to the dead-letter table as the commit of ``batch_id``, counted
        (``batch``: a column with each row's own batch id, when the commit holds several)."""
        from pyspark.sql import Observation

        observation = Observation()
        return self._append(
            dead_letter_rows(
                dead_rows.observe(observation, *count_columns()),
                batch_id if batch is None else batch,
            ),
            observation,
            self.stream.dead_letter_table_path,
            batch_id=batch_id,
            metadata=metadata,
            partition_by=[],
        )

    @property
    def pending_dead_letters(self) -> int:
        """Dead letters waiting in the driver for their commit."""
        with self._flush_lock:
            return self.ledger.waiting_rows

    def flush_dead_letters(
        self, *, upto: int | None = None, due_only: bool = False, recover: bool = True
    ) -> bool:
        """Commit the waiting dead letters as one dead-letter commit whose ``txnVersion`` is
        ``upto`` (default: as far as the ledger allows: the table's last batch, or the one
        before a batch whose own dead letters are on their way). With ``due_only``, only once
        the oldest has waited ``dead_letter_flush_seconds`` or they weigh as much as one
        batch's inline collect may. An earlier attempt whose outcome is unknown is settled
        first by the dead-letter table's own version (never written twice). A recovery planned
        at start is written first (``recover`` False: then nothing is committed while one is
        pending). Returns whether it committed."""
        from pyspark.sql import functions as F  # noqa: N812

        with self._flush_lock:
            if recover:
                self.recover_dead_letters()
            elif self.recovery is not None:
                return False  # its version comes first
            if self.ledger.in_doubt is not None:
                attempt = self.ledger.in_doubt
                if self.ledger.resolve(self._dead_letter_table_batch()):
                    log.info(
                        "dead letters of batches %s were committed by the attempt that "
                        "reported a failure (txnVersion %s): not written again",
                        attempt.batch_ids,
                        attempt.version,
                    )
            flush = self.ledger.plan(upto=upto, due_only=due_only, now=time.monotonic())
            if flush is None:
                return False
            assert self._inline_schema is not None
            clock = time.monotonic()
            frame = inline_dead_letters(
                self.spark,
                self._inline_schema,
                [(p.batch_id, p.records) for p in flush.batches],
            )
            metadata = commit_metadata(self.stream.txn_app_id, flush.version, None, self.routing)
            dead = self._append_dead_letters(frame, flush.version, metadata, batch=F.col(BATCH))
            if dead.rows != flush.rows:
                raise BatchMismatchError(
                    f"batches {flush.batch_ids} of {self.stream.txn_app_id}: their dead-letter "
                    f"commit holds {dead.rows} records where {flush.rows} were waiting"
                )
            self.ledger.landed(flush)
            waiting = self.ledger.waiting_rows
        self.metrics.dead_letters_pending.set(waiting)
        self._dead_letters_done(
            "dead_letters_committed", flush.batch_ids, flush.version, dead, clock
        )
        return True

    def plan_recovery(
        self, read_range: Callable[[TopicOffsets, TopicOffsets], DataFrame]
    ) -> DeadLetterRecovery | None:
        """At start, before the query: plan writing the dead letters a stopped driver left
        waiting (``recovery``; None when there are none). Only the logs are read here; the
        records are read again by :meth:`recover_dead_letters`, after the first table commit
        of this run (or at once, when the caller finds no backlog).

        The table's last commit lists the batches whose dead letters were waiting when it was
        made, and records where it started itself; each of those batches' commits records its
        offsets. They are read again from Kafka (``read_range(start, end)``), routed in full,
        their valid records checked against the rows their table commits wrote, and their
        refused records committed as one dead-letter commit. A last batch whose start is not
        recorded committed its dead letters at once: if they are missing, Spark replays it.

        Until it is written, no other dead-letter commit goes first (its version is lower),
        every table commit lists its batches as waiting (a crash meanwhile finds them again),
        and Spark's replay of a batch it covers writes nothing more."""
        self.recovery = None
        last, done = (
            self.table_batch,
            -1 if self.dead_letter_batch is None else self.dead_letter_batch,
        )
        if last < 0 or done >= last:
            return None
        path = self.stream.table_path
        latest = cached_version(self.spark, path)
        entry = recorded_entry(
            self.spark, path, self.stream.txn_app_id, last, latest_version=latest
        )
        if entry is None:
            return None  # not in the log: nothing recorded to go by (Spark's replay still applies)
        waiting = [int(b) for b in entry.get(PENDING_DEAD_LETTERS) or [] if int(b) > done]
        version = last - 1
        start, end = entry_offsets(entry, START_OFFSETS), entry_offsets(entry, "endOffsets")
        if start is not None and end is not None:
            version = last
            # Its own dead letters were unknown when it committed; none when it wrote a row
            # for every offset of its range (the usual case: a clean stream's dead-letter table
            # lags its table, and this spares reading its last batch again at every start).
            if entry.get(WRITTEN_ROWS) != records_between(start, end):
                waiting.append(last)
        if not waiting:
            return None
        ranges: list[tuple[int, TopicOffsets, TopicOffsets]] = []
        written: int | None = 0
        for batch_id in waiting:
            recorded = (
                entry
                if batch_id == last
                else recorded_entry(
                    self.spark, path, self.stream.txn_app_id, batch_id, latest_version=latest
                )
            )
            start = None if recorded is None else entry_offsets(recorded, START_OFFSETS)
            end = None if recorded is None else entry_offsets(recorded, "endOffsets")
            if recorded is None or start is None or end is None:
                raise DeadLettersLostError(
                    f"batch {batch_id} of {self.stream.txn_app_id} left dead letters waiting "
                    f"when its driver stopped, but the table's log no longer records where it "
                    "is in Kafka. Its valid rows are in the table; its refused records are not "
                    "in the dead-letter table. Restore the table's log or accept the loss by "
                    "writing the dead-letter table's transaction for this stream past it."
                )
            rows_written = self._check_routing(batch_id, recorded)
            written = None if written is None or rows_written is None else written + rows_written
            ranges.append((batch_id, start, end))
        self.recovery = DeadLetterRecovery(
            tuple(ranges),
            written,
            version,
            read_range,
            interrupted=entry.get(RECOVERING_DEAD_LETTERS) is not None,
        )
        line = {"event": "dead_letters_to_recover", "batches": waiting, "txnVersion": version}
        log.info("%s", json.dumps(line, separators=(",", ":")))
        return self.recovery

    def recover_dead_letters(self) -> None:
        """Write the dead letters :meth:`plan_recovery` planned, if still to be written: their
        batches read again from Kafka, checked, and committed as one dead-letter commit. An
        attempt that fails is looked up in the dead-letter table before anything else: one
        that landed all the same is done, never written twice."""
        from pyspark import StorageLevel
        from pyspark.sql import functions as F  # noqa: N812

        with self._flush_lock:
            plan = self.recovery
            if plan is None:
                return
            clock = time.monotonic()
            frames = [
                self.router.split(plan.read_range(start, end)).withColumn(BATCH, F.lit(batch_id))
                for batch_id, start, end in plan.batches
            ]
            rows = frames[0]
            for frame in frames[1:]:
                rows = rows.unionByName(frame)
            rows.persist(StorageLevel.MEMORY_AND_DISK)
            try:
                valid = rows.where(F.col(REASON).isNull()).count()
                if plan.written is not None:
                    self._check_read_again(plan.batch_ids, plan.written, valid)
                metadata = commit_metadata(self.stream.txn_app_id, plan.version, None, self.routing)
                dead = self._append_dead_letters(
                    self.router.refused(rows), plan.version, metadata, batch=F.col(BATCH)
                )
            except Exception:
                self.recovery_failures += 1
                if not self._recovery_landed(plan):
                    raise
                return
            finally:
                rows.unpersist()
            known = self.dead_letter_batch
            self.dead_letter_batch = plan.version if known is None else max(plan.version, known)
            self.recovery = None
        self._dead_letters_done("dead_letters_recovered", plan.batch_ids, plan.version, dead, clock)

    def _recovery_landed(self, plan: DeadLetterRecovery) -> bool:
        """After a failed attempt: whether its commit landed all the same (a lost answer), by
        the dead-letter table's own version; then it is done, never written again."""
        committed = self._dead_letter_table_batch()
        if committed is None or committed < plan.version:
            return False
        log.info(
            "dead letters of batches %s were committed by the attempt that reported a failure "
            "(txnVersion %s): not written again",
            plan.batch_ids,
            plan.version,
        )
        self.dead_letter_batch = committed
        self.recovery = None
        return True

    def _recovery_covers(self, batch_id: int) -> bool:
        """Whether the planned recovery writes ``batch_id``'s dead letters, or declares it has
        none (its version is past it): Spark's replay of it then writes nothing more."""
        with self._flush_lock:
            return self.recovery is not None and batch_id <= self.recovery.version

    def _kafka_identity(self, topics: list[str]) -> dict[str, Any] | None:
        """The cluster and topic ids recorded with the batch's table commit, so a start can tell
        another cluster or a recreated topic from the one the offsets were read in. Looked up
        once, and again when a topic shows up (a pattern); a failed look-up records none (the
        commit must not wait on it)."""
        known = self._identity
        if known is None or not known.covers(topics):
            try:
                known = self.admin.identity(topics)
            except Exception as error:  # the record is a safeguard, not the batch's work
                log.warning("reading the Kafka cluster and topic ids failed: %s", error)
                return None
            self._identity = known
        return known.only(topics).render()

    def _check_read_again(self, batches: list[int], written: int, valid: int) -> None:
        """Batches read again from Kafka for their dead letters, under the routing that wrote
        their table rows (checked before): a record never changes at its offset, it can only be
        gone (compacted, deleted by retention), so Kafka now gives at most the valid records
        the table holds. The refused records still there are the dead letters to write; those
        gone cannot be copied, and are counted. More valid records than the table holds cannot
        be: nothing is written then."""
        if valid > written:
            raise BatchMismatchError(
                f"batches {batches} of {self.stream.txn_app_id}: their table commits hold "
                f"{written} rows, but Kafka now gives {valid} valid records for the same "
                "offsets, which no compaction or retention explains. Nothing was written; "
                "compare the offsets in the table's commit metadata of these batches with "
                "the topic."
            )
        self._vanished(batches[-1], valid=written - valid, refused=None)

    def _vanished(self, batch_id: int, *, valid: int, refused: int | None) -> None:
        """Count and log records of a committed batch that Kafka no longer held when it was
        read again (``refused`` None: how many of those were refused is not known)."""
        if valid == 0 and not refused:
            return
        if valid:
            self.metrics.vanished_records.labels(kind="valid").inc(valid)
        if refused:
            self.metrics.vanished_records.labels(kind="refused").inc(refused)
        line = {
            "event": "records_vanished",
            "batch": batch_id,
            "valid": valid,
            "refused": "unknown" if refused is None else refused,
            "why": "Kafka no longer holds them (compacted, or deleted by retention) since the "
            "batch was read: valid ones are in the table; refused ones are not in the "
            "dead-letter table",
        }
        log.warning("%s", json.dumps(line, separators=(",", ":")))

    def _dead_letters_done(
        self, event: str, batches: list[int], version: int, dead: Counts, since: float
    ) -> None:
        """Count and log a dead-letter commit that covers several batches."""
        for reason, n in dead.reasons.items():
            self.metrics.dead_letter_rows.labels(reason=reason).inc(n)
        line = {
            "event": event,
            "batches": batches,
            "txnVersion": version,
            "deadLettered": dead.reasons,
            "seconds": round(time.monotonic() - since, 3),
        }
        log.info("%s", json.dumps(line, separators=(",", ":")))

    def _finish_replay(
        self, rows: DataFrame, batch_id: int, metadata: str, report: BatchReport
    ) -> None:
        """A batch whose table rows an earlier driver committed before it died: write its dead
        letters, provided this driver routes as that one did and reads the same valid rows."""

        clock = time.monotonic()
        self.recover_dead_letters()  # its version is lower: it goes first
        written = self._check_replay_routing(batch_id)
        from pyspark import StorageLevel

        rows.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            by_reason = {r[0]: int(r[1]) for r in rows.groupBy(REASON).count().collect()}
            valid = by_reason.pop(None, 0)
            if written is not None:
                self._check_read_again([batch_id], written, valid)
            dead = self._append_dead_letters(self.router.refused(rows), batch_id, metadata)
        finally:
            rows.unpersist()
        if dead.rows != sum(by_reason.values()):
            raise BatchMismatchError(
                f"batch {batch_id} of {self.stream.txn_app_id}: its dead-letter commit holds "
                f"{dead.rows} records where {sum(by_reason.values())} were counted just before "
                "(the topic changed while the batch ran); the stream stops. Compare the batch's "
                "offsets in the table's commit metadata with the topic."
            )
        report.rows = valid + dead.rows
        report.dead_letters = dead.reasons
        report.seconds["write_dead_letter"] = time.monotonic() - clock

    def _dead_letters_hold(self, batch_id: int) -> bool:
        """Whether the dead-letter table already holds this batch. Only a replay of a batch the
        table already held at start can find them written (the table is written first), so the
        dead-letter log is read only for such a replay, once."""
        if batch_id > self.replayable:
            return False
        if self.dead_letter_batch is None:
            committed = self._dead_letter_table_batch()
            self.dead_letter_batch = -1 if committed is None else committed
        return batch_id <= self.dead_letter_batch

    def _dead_letter_table_batch(self) -> int | None:
        """The stream's last batch in the dead-letter table, read from its log (None: none)."""
        path = self.stream.dead_letter_table_path
        return table_state(self.spark, path, self.stream.txn_app_id).stream_batch

    def _check_replay_routing(self, batch_id: int) -> int | None:
        """Before writing the dead letters of a batch whose table rows an earlier driver
        committed: that driver must have routed as this one does, or a record would go to both
        tables (valid then, refused now) or to neither (the reverse). Returns the rows that
        commit wrote (None if its commit info does not say)."""
        path = self.stream.table_path
        entry = recorded_entry(
            self.spark,
            path,
            self.stream.txn_app_id,
            batch_id,
            latest_version=cached_version(self.spark, path),
        )
        return self._check_routing(batch_id, entry)

    def _check_routing(self, batch_id: int, entry: dict[str, Any] | None) -> int | None:
        """Raise RoutingChangedError unless the table commit ``entry`` of ``batch_id`` was routed
        as this driver routes; returns the rows it wrote (None if not recorded)."""
        path = self.stream.table_path
        recorded = None if entry is None else entry.get("routing")
        if recorded == self.routing:
            assert entry is not None
            written = entry.get(WRITTEN_ROWS)
            return None if written is None else int(written)
        found = (
            "its commit is no longer in the table's log (log retention removed it)"
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

    def sync_group(self) -> None:
        """Commit the stream's position to its consumer group when this process has not yet
        (an idle stream's start: a group it may not use is named without waiting for records),
        and again while the group refuses it (a grant then clears Degraded without a batch).
        One attempt: the caller's next round is the retry. Skipped while a batch commits."""
        if not (self._group_untried or self.group_commit_problem):
            return
        if not self._group_lock.acquire(blocking=False):
            return  # a batch is committing: it settles the group
        try:
            self._commit_group_locked(self.committed_offsets, attempts=1)
        finally:
            self._group_lock.release()

    def _commit_group(self, offsets: TopicOffsets) -> None:
        with self._group_lock:
            self._commit_group_locked(offsets, attempts=3)

    def _commit_group_locked(self, offsets: TopicOffsets, attempts: int) -> None:
        if not any(offsets.values()):
            return  # nothing to say: neither a success nor a refusal
        group = self.stream.consumer_group
        self._group_untried = False  # after any outcome: batches commit from here on
        for attempt in range(attempts):
            try:
                self.admin.commit_group_offsets(group, offsets)
                self.group_commit_problem = ""
                return
            except Exception as error:  # monitoring only: never fail a committed batch for it
                problem = group_commit_problem(group, error)
                if problem is None and attempt < attempts - 1:
                    time.sleep(0.5 * (attempt + 1))  # e.g. the group coordinator is loading
                    continue
                self.metrics.group_commit_failures.inc()
                if problem is None:
                    log.warning("committing offsets to %s failed: %s", group, error)
                elif problem != self.group_commit_problem:  # said once, not after every try
                    log.warning("committing offsets to %s failed: %s", group, problem)
                    self.group_commit_problem = problem
                return

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
        m.dead_letters_pending.set(self.pending_dead_letters)
        if report.table_version is not None:
            m.table_version.set(report.table_version)
        m.last_commit_time.set(time.time())
        self.last_report = report
        self.recent_reports[report.batch_id] = report
        for old in sorted(self.recent_reports)[:-RECENT_REPORTS]:
            del self.recent_reports[old]
        log.info("%s", report.to_json())
