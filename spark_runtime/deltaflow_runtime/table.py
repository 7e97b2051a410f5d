"""What a Delta table knows about this stream: its version, the stream's last transaction and the
Kafka end offsets recorded with each of the stream's commits.

Delta keeps one ``txn`` action per application id: the highest ``txnVersion`` committed with that
``txnAppId``. The runtime writes ``txnVersion = batch id``, so the table itself says which batches
are in it. The Python Delta API exposes no transaction ids, so they are read from Delta's own
snapshot (``DeltaLog.forTableWithSnapshot``) through py4j; kept in this one module.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from deltaflow_runtime.checkpoint import HadoopDir, TopicOffsets
from deltaflow_runtime.jvm import java_frame, java_session, jvm

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pyspark.sql import DataFrame, SparkSession

# Key of the stream's entry in each commit's userMetadata.
METADATA_KEY = "deltaflow"
# Added by recorded_entry: the rows the commit wrote (Delta's operationMetrics.numOutputRows).
WRITTEN_ROWS = "writtenRows"

# Tasks Delta's state reconstruction runs in. A commit with txnAppId reconstructs the whole table
# state to read the stream's txn (delta-spark 4.4 does not take it from the .crc file), so this
# is on the critical path of every batch. Measured on 2 cores (`bash bench/run.sh commit-cost`,
# bench/README "A commit's fixed cost"): a table of 10k files commits cheapest in 1-2 tasks, 50k
# in 2-4, 200k in 8-9; more tasks cost more than they split.
SNAPSHOT_PARTITIONS = "spark.databricks.delta.snapshotPartitions"
FILES_PER_SNAPSHOT_PARTITION = 25_000
MAX_SNAPSHOT_PARTITIONS = 50  # Delta's own default
# Tables of unknown size, start-up reads and the maintenance jobs (session.DEFAULT_CONF).
UNKNOWN_SIZE_SNAPSHOT_PARTITIONS = 8


@dataclass(frozen=True)
class TableState:
    """A snapshot of a table as far as one stream is concerned."""

    version: int  # -1: the table does not exist
    stream_batch: int | None  # highest batch id committed with the stream's txnAppId


def table_state(
    spark: SparkSession, path: str, txn_app_id: str, *, sized: bool = False
) -> TableState:
    """The table's latest version and the stream's latest committed batch id in it.

    The table's checksum answers when it holds the transaction ids (Delta writes them with
    every incremental commit; see ``append_batch``). Otherwise Delta replays the log (Spark jobs
    over ``snapshotPartitions`` partitions, seconds on a cold driver). With ``sized``, such a
    replay first gets the partitions the table's size calls for (its checksum says, without a
    replay): a small table replays in one task instead of the unknown size's eight.
    """
    if sized:
        partitions = snapshot_partitions(known_files(spark, path))
        spark.conf.set(SNAPSHOT_PARTITIONS, str(partitions))
    delta_log = jvm(spark).org.apache.spark.sql.delta.DeltaLog
    snapshot = delta_log.forTableWithSnapshot(java_session(spark), path)._2()
    version = int(snapshot.version())
    if version < 0:
        return TableState(-1, None)
    from_checksum = jvm(spark).io.deltaflow.delta.StreamAppend.checksumTxnVersion(
        snapshot, txn_app_id
    )
    if from_checksum.isDefined():
        batch = int(from_checksum.get())
        return TableState(version, batch if batch >= 0 else None)
    txn = snapshot.transactions().get(txn_app_id)
    return TableState(version, int(txn.get()) if txn.isDefined() else None)


@dataclass(frozen=True)
class Appended:
    """What one append did: whether it wrote (False: the table held the batch), and whether
    its commit was one Delta checkpoints the log at (written after it, StreamAppend)."""

    written: bool
    log_checkpoint: bool


def append_batch(
    frame: DataFrame, path: str, options: Mapping[str, str], partition_by: list[str]
) -> bool:
    """As append_stream_batch; whether it wrote."""
    return append_stream_batch(frame, path, options, partition_by).written


def append_stream_batch(
    frame: DataFrame, path: str, options: Mapping[str, str], partition_by: list[str]
) -> Appended:
    """Append ``frame`` to the table at ``path`` as ``df.write.format("delta")`` with these
    ``options`` (which name ``txnAppId`` and ``txnVersion``) would; False, writing nothing,
    when the table already holds that batch of that stream.

    Through ``io.deltaflow.delta.StreamAppend`` (spark_runtime/jvm): Delta's own write and
    commit, but the stream's last batch is read from the table's checksum, where Delta's
    incremental commits keep the transaction ids (up to 100), instead of a replay of the
    table's whole state on every commit (about a third of a small batch's CPU, more as the
    table grows). Without such a checksum (an older writer's, a table that expires
    transaction ids) it replays, as Delta does. The calls run with the frame's session active.
    """
    append = jvm(frame.sparkSession).io.deltaflow.delta.StreamAppend.start(
        java_frame(frame), path, dict(options), list(partition_by)
    )
    written = bool(append.commit())
    return Appended(written, written and int(append.checkpointDue()) >= 0)


def await_log_checkpoints(spark: SparkSession, seconds: float) -> bool:
    """Wait up to ``seconds`` for the log checkpoints appends made due (written after their
    commits, see StreamAppend); whether none is left. A stop waits so the work is not lost."""
    waited = jvm(spark).io.deltaflow.delta.StreamAppend.awaitCheckpoints(int(seconds * 1000))
    return bool(waited)


def cached_version(spark: SparkSession, path: str) -> int:
    """The table version as this JVM last saw it (after its own commits): no log replay, no
    Spark job; -1 if unknown. For metrics, never for decisions."""
    delta_log = jvm(spark).org.apache.spark.sql.delta.DeltaLog.forTable(java_session(spark), path)
    return int(delta_log.unsafeVolatileSnapshot().version())


def snapshot_partitions(files: int | None) -> int:
    """Tasks for the state reconstruction of a table of ``files`` files (None: size unknown)."""
    if files is None:
        return UNKNOWN_SIZE_SNAPSHOT_PARTITIONS
    wanted = -(-files // FILES_PER_SNAPSHOT_PARTITION)
    return max(1, min(MAX_SNAPSHOT_PARTITIONS, wanted))


def known_files(spark: SparkSession, path: str) -> int | None:
    """Files in the table as of the snapshot this JVM last loaded or committed, from its
    checksum: 0 when there is no table yet, None when the snapshot has no checksum. No log
    replay, no Spark job."""
    snapshot = (
        jvm(spark)
        .org.apache.spark.sql.delta.DeltaLog.forTable(java_session(spark), path)
        .unsafeVolatileSnapshot()
    )
    if int(snapshot.version()) < 0:
        return 0
    checksum = snapshot.checksumOpt()
    return int(checksum.get().numFiles()) if checksum.isDefined() else None


# Keys of the stream's entry in a table commit: where the batch started (when the writer knew),
# and the earlier batches whose dead letters were still waiting in the driver when it committed
# (see sink.BatchWriter): after a crash, start-up reads those batches again from Kafka.
START_OFFSETS = "startOffsets"
PENDING_DEAD_LETTERS = "pendingDeadLetters"
# The version of a dead-letter recovery that was still to be written when the commit was made.
RECOVERING_DEAD_LETTERS = "recoveringDeadLetters"


def _render(offsets: TopicOffsets) -> dict[str, dict[str, int]]:
    return {t: {str(p): o for p, o in sorted(ps.items())} for t, ps in sorted(offsets.items())}


def commit_metadata(
    txn_app_id: str,
    batch_id: int,
    end_offsets: TopicOffsets | None,
    routing: str | None = None,
    *,
    start_offsets: TopicOffsets | None = None,
    pending_dead_letters: list[int] | None = None,
    recovering: int | None = None,
    kafka: Mapping[str, Any] | None = None,
) -> str:
    """The userMetadata the stream writes with each commit: which batch, where it started and
    ended, the fingerprint of the routing that split it between the table and the dead-letter
    table, which earlier batches' dead letters were not yet committed (``recovering``: the
    version of a start's recovery among them), and which Kafka cluster and topic ids its
    offsets belong to (``kafka``, under ``"kafka"``)."""
    entry: dict[str, Any] = {"txnAppId": txn_app_id, "batchId": batch_id}
    if kafka is not None:
        entry["kafka"] = dict(kafka)
    if routing is not None:
        entry["routing"] = routing
    if end_offsets is not None:
        entry["endOffsets"] = _render(end_offsets)
    if start_offsets is not None:
        entry[START_OFFSETS] = _render(start_offsets)
    if pending_dead_letters:
        entry[PENDING_DEAD_LETTERS] = sorted(pending_dead_letters)
    if recovering is not None:
        entry[RECOVERING_DEAD_LETTERS] = recovering
    return json.dumps({METADATA_KEY: entry}, separators=(",", ":"), sort_keys=True)


def entry_offsets(entry: dict[str, Any], key: str) -> TopicOffsets | None:
    """Offsets recorded in a stream's commit entry under ``key`` (``endOffsets`` or
    :data:`START_OFFSETS`); None when not recorded or not readable."""
    recorded = entry.get(key)
    if not isinstance(recorded, dict):
        return None
    try:
        return {str(t): {int(p): int(o) for p, o in ps.items()} for t, ps in recorded.items()}
    except (ValueError, TypeError, AttributeError):
        return None


def parse_commit_metadata(user_metadata: str | None) -> tuple[str, int, TopicOffsets | None] | None:
    """(txnAppId, batch id, end offsets) from a commit's userMetadata, or None if not ours."""
    if not user_metadata:
        return None
    try:
        entry = json.loads(user_metadata)[METADATA_KEY]
        offsets = entry.get("endOffsets")
        parsed = (
            {t: {int(p): int(o) for p, o in ps.items()} for t, ps in offsets.items()}
            if offsets is not None
            else None
        )
        return str(entry["txnAppId"]), int(entry["batchId"]), parsed
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def commit_info(commit_json: str) -> dict[str, Any]:
    """The commitInfo action of one Delta commit file (newline-delimited actions); {} if none."""
    for line in commit_json.splitlines():
        if '"commitInfo"' in line:
            info = json.loads(line).get("commitInfo")
            return info if isinstance(info, dict) else {}
    return {}


def commit_user_metadata(commit_json: str) -> str | None:
    """The userMetadata of one Delta commit file."""
    value = commit_info(commit_json).get("userMetadata")
    return str(value) if value is not None else None


def _commit_info_at(log: HadoopDir, version: int) -> dict[str, Any] | None:
    """The commitInfo of one version (None when log retention removed it). Delta writes it as
    the first action, so only the first line is read; older writers put it anywhere."""
    name = f"{version:020d}.json"
    line = log.first_line(name)
    if line is None:
        return None
    if '"commitInfo"' in line:
        return commit_info(line)
    text = log.read(name)
    return None if text is None else commit_info(text)


def _stream_entry(info: dict[str, Any], txn_app_id: str) -> tuple[int, dict[str, Any]] | None:
    """(batch id, the stream's userMetadata entry + WRITTEN_ROWS) of one commit's commitInfo;
    None when the commit is not the stream's."""
    user_metadata = info.get("userMetadata")
    parsed = parse_commit_metadata(None if user_metadata is None else str(user_metadata))
    if parsed is None or parsed[0] != txn_app_id:
        return None
    entry: dict[str, Any] = json.loads(str(user_metadata))[METADATA_KEY]
    metrics = info.get("operationMetrics") or {}
    if "numOutputRows" in metrics:
        entry[WRITTEN_ROWS] = int(metrics["numOutputRows"])
    return parsed[1], entry


@dataclass(frozen=True)
class StreamCommit:
    """The commit that holds the table's current last batch of the stream, found by walking the
    log back from its latest version. A RESTORE on the way jumps to the version it restored:
    Delta keeps the stream's transaction id through a RESTORE, so only the log tells that the
    batches after ``batch`` are gone."""

    batch: int
    version: int
    entry: dict[str, Any]  # the stream's userMetadata entry (+ WRITTEN_ROWS)
    restore_version: int | None = None  # the RESTORE that took the table back past the stream
    restored_to: int | None = None  # the version it restored


def _restored_to(info: dict[str, Any], log: HadoopDir, before: int) -> int | None:
    """The version a RESTORE commit took the table back to (by version or by timestamp)."""
    params = info.get("operationParameters") or {}
    if params.get("version") is not None:
        return int(params["version"])
    stamp = params.get("timestamp")
    if stamp is None:
        return None
    try:
        when = datetime.fromisoformat(str(stamp))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    limit = when.timestamp() * 1000
    for version in range(before, -1, -1):  # the latest commit at or before the timestamp
        earlier = _commit_info_at(log, version)
        if earlier is None:
            return None
        if float(earlier.get("timestamp") or 0) <= limit:
            return version
    return None


def last_stream_commit(
    spark: SparkSession, path: str, txn_app_id: str, *, latest_version: int
) -> StreamCommit | None:
    """The stream's commit the table's current state ends with (see :class:`StreamCommit`);
    None when the log no longer holds it."""
    log = HadoopDir(spark, f"{path.rstrip('/')}/_delta_log")
    version = latest_version
    restore: tuple[int, int] | None = None
    while version >= 0:
        info = _commit_info_at(log, version)
        if info is None:
            return None
        ours = _stream_entry(info, txn_app_id)
        if ours is not None:
            batch, entry = ours
            return StreamCommit(
                batch=batch,
                version=version,
                entry=entry,
                restore_version=restore[0] if restore else None,
                restored_to=restore[1] if restore else None,
            )
        if info.get("operation") == "RESTORE":
            target = _restored_to(info, log, version - 1)
            if target is not None and target < version:
                restore = restore or (version, target)
                version = target
                continue
        version -= 1
    return None


def recorded_entry(
    spark: SparkSession,
    path: str,
    txn_app_id: str,
    batch_id: int,
    *,
    latest_version: int,
) -> dict[str, Any] | None:
    """The stream's userMetadata entry of its commit of ``batch_id``, with the rows that commit
    wrote under ``WRITTEN_ROWS`` when Delta recorded them; None when the log no longer holds it.

    Searches back from ``latest_version`` through every commit the log still holds (an idle
    stream's last commit may lie behind months of maintenance commits), reading one line of each.
    """
    log = HadoopDir(spark, f"{path.rstrip('/')}/_delta_log")
    for version in range(latest_version, -1, -1):
        info = _commit_info_at(log, version)
        if info is None:
            return None  # cleaned up by log retention: nothing older is left either
        ours = _stream_entry(info, txn_app_id)
        if ours is not None:
            if ours[0] == batch_id:
                return ours[1]
            if ours[0] < batch_id:
                return None
    return None


def recorded_end_offsets(
    spark: SparkSession,
    path: str,
    txn_app_id: str,
    batch_id: int,
    *,
    latest_version: int,
) -> TopicOffsets | None:
    """The end offsets the stream recorded with its commit of ``batch_id`` (see
    :func:`recorded_entry`); None when not found."""
    entry = recorded_entry(spark, path, txn_app_id, batch_id, latest_version=latest_version)
    if entry is None:
        return None
    parsed = parse_commit_metadata(json.dumps({METADATA_KEY: entry}))
    return parsed[2] if parsed is not None else None
