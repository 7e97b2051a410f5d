"""Start-up guards: refuse to run when the checkpoint and the table disagree.

Spark numbers batches from 0 in a new checkpoint. Next to a table that already holds this stream's
transactions (``txnAppId`` with ``txnVersion`` = batch id), a lost checkpoint would make Delta skip
every new batch up to the last recorded one as "already written" (silent loss), and a checkpoint
from elsewhere would re-plan offsets the table already holds or skip some (duplicates or loss).
These checks are pure: the caller gathers the facts, :func:`check_checkpoint` decides.
"""

from __future__ import annotations

from dataclasses import dataclass

from deltaflow_runtime.checkpoint import CheckpointState, TopicOffsets, render_offsets
from deltaflow_runtime.errors import DeltaflowError, ExitCode
from deltaflow_runtime.kafka_admin import KafkaIdentity
from deltaflow_runtime.table import StreamCommit, TableState


class CheckpointMismatchError(DeltaflowError):
    """The checkpoint does not belong with the table (or with the Kafka it reads); the message
    says how to recover."""

    exit_code = ExitCode.CHECKPOINT

    def __init__(self, reason: str, message: str) -> None:
        # CheckpointLost | CheckpointBehind | CheckpointMismatch | TableLost | TableBehind |
        # DeadLetterTableAhead | KafkaClusterChanged | TopicRecreated
        super().__init__(message, reason)


@dataclass(frozen=True)
class StreamFacts:
    """What the checkpoint and the table say, gathered at start."""

    table_path: str
    checkpoint_path: str
    txn_app_id: str
    checkpoint: CheckpointState
    table: TableState
    dead_letter_table_path: str
    dead_letter: TableState
    # offsets/<table batch> in the checkpoint, and the end offsets the table recorded for it
    checkpoint_offsets_at_table_batch: TopicOffsets | None = None
    table_offsets_at_table_batch: TopicOffsets | None = None
    # the stream's commit the table's current state ends with (it tells a RESTORE)
    last_commit: StreamCommit | None = None


def _recovery(facts: StreamFacts, config_hint: str) -> str:
    batch = facts.table.stream_batch
    return (
        "To recover: (1) restore the checkpoint directory from a backup, or "
        f"(2) run `deltaflow recover-checkpoint --config {config_hint}`: it moves nothing, "
        f"refuses if the checkpoint is not empty, and rebuilds it at batch {batch} from the Kafka "
        "end offsets the table recorded with that commit, so the stream resumes exactly where "
        "the table ends; or (3) start over with a new DeltaIngestion writing a new table."
    )


def check_checkpoint(facts: StreamFacts, config_hint: str = "<ingestion.yaml>") -> None:
    """Raise :class:`CheckpointMismatchError` unless the checkpoint can safely resume the table.

    Every batch commits the table first (an empty commit when all its records were refused),
    then (at once or grouped with later batches) the dead-letter table, then ``commits/<batch>``
    in the checkpoint; so the dead-letter table never holds a later batch than the table, nor
    the checkpoint a later committed batch.
    """
    cp, table, dead = facts.checkpoint, facts.table, facts.dead_letter
    batch = table.stream_batch
    if dead.stream_batch is not None and (batch is None or dead.stream_batch > batch):
        holds = "no transaction" if batch is None else f"transactions up to batch {batch}"
        raise CheckpointMismatchError(
            "DeadLetterTableAhead",
            f"Refusing to start: the dead-letter table {facts.dead_letter_table_path} holds this "
            f"stream's transactions up to batch {dead.stream_batch} (txnAppId "
            f"{facts.txn_app_id}), but the table {facts.table_path} holds {holds}: the table was "
            "deleted, replaced or restored to an older version, and the dead-letter table was "
            "not. Delta would skip this stream's next dead letters as already written. Restore "
            "the table to its latest version, or move the dead-letter table away (it belongs "
            "with the table that is gone) together with the checkpoint if the table is new.",
        )
    if batch is None:
        if cp.latest_committed is not None:
            raise CheckpointMismatchError(
                "TableLost",
                f"Refusing to start: the checkpoint {facts.checkpoint_path} has committed batches "
                f"up to {cp.latest_committed}, but the table {facts.table_path} holds no "
                f"transaction of this stream (txnAppId {facts.txn_app_id}): the table was "
                "deleted or replaced, and resuming would leave out everything before. Restore the "
                "table, or delete the checkpoint (and the dead-letter table "
                f"{facts.dead_letter_table_path}) to re-ingest from "
                "spec.source.startingOffsets.",
            )
        return
    commit = facts.last_commit
    if commit is not None and commit.restore_version is not None and commit.batch < batch:
        raise CheckpointMismatchError(
            "TableBehind",
            f"Refusing to start: the table {facts.table_path} was restored (version "
            f"{commit.restore_version}: RESTORE to version {commit.restored_to}) to before this "
            f"stream's batches {commit.batch + 1} to {batch}: their rows are gone, but Delta "
            f"still records batch {batch} as written for txnAppId {facts.txn_app_id}, so those "
            "batches can be neither resumed past (silent loss) nor written again (Delta skips "
            "them). Nothing was written. To recover: undo the restore (RESTORE TABLE "
            f"delta.`{facts.table_path}` TO VERSION AS OF {commit.restore_version - 1}); to keep "
            "the restored table, write it with a new DeltaIngestion (a new table).",
        )
    head = (
        f"Refusing to start: the table {facts.table_path} holds this stream's transactions up "
        f"to batch {batch} (txnAppId {facts.txn_app_id}), but the checkpoint "
        f"{facts.checkpoint_path} "
    )
    consequence = (
        " Starting anyway would restart batch ids: Delta would skip new batches as already "
        "written (silent loss), and a fresh txnAppId would write the table's records again "
        "(duplicates). Nothing was written. "
    )
    if cp.empty:
        what = "does not exist" if not cp.exists else "holds no batches"
        raise CheckpointMismatchError(
            "CheckpointLost", head + what + "." + consequence + _recovery(facts, config_hint)
        )
    assert cp.latest_planned is not None
    if cp.latest_planned < batch:
        raise CheckpointMismatchError(
            "CheckpointBehind",
            head + f"ends at batch {cp.latest_planned}: it was replaced by an older copy or "
            "another stream's." + consequence + _recovery(facts, config_hint),
        )
    if cp.latest_committed is not None and cp.latest_committed > batch:
        raise CheckpointMismatchError(
            "TableBehind",
            head + f"has committed batches up to {cp.latest_committed}: the table was restored "
            f"or rolled back to an older version, and batches {batch + 1} to "
            f"{cp.latest_committed} are no longer in it. Resuming would skip them (silent "
            "loss). Nothing was written. To recover: restore the table to its latest version; "
            "or, to keep it as it is, move the checkpoint away and run `deltaflow "
            f"recover-checkpoint --config {config_hint}`: the stream then reads the batches after "
            f"{batch} from Kafka again (while Kafka still holds them).",
        )
    ours, recorded = facts.checkpoint_offsets_at_table_batch, facts.table_offsets_at_table_batch
    if ours is not None and recorded is not None and ours != recorded:
        raise CheckpointMismatchError(
            "CheckpointMismatch",
            head + f"planned batch {batch} with end offsets {render_offsets(ours)} while the "
            f"table recorded {render_offsets(recorded)}: the checkpoint belongs to another "
            "stream or run." + consequence + _recovery(facts, config_hint),
        )


def check_kafka_identity(
    recorded: KafkaIdentity, current: KafkaIdentity, batch: int, bootstrap_servers: str
) -> None:
    """Raise :class:`CheckpointMismatchError` when the Kafka the stream would resume in is not
    the one its last batch (``batch``) was read from: another cluster, or a topic deleted and
    created again. Resuming would read other records at the checkpoint's offsets, or skip the
    new topic's first ones, and Spark's failOnDataLoss sees neither. A topic gone altogether is
    Spark's to handle; an identity not recorded (an older runtime) is not checked."""
    if recorded.cluster_id and current.cluster_id and recorded.cluster_id != current.cluster_id:
        raise CheckpointMismatchError(
            "KafkaClusterChanged",
            f"Refusing to start: spec.source.bootstrapServers ({bootstrap_servers}) reaches the "
            f"Kafka cluster {current.cluster_id}, but batch {batch} was read from the cluster "
            f"{recorded.cluster_id}: the checkpoint's offsets mean nothing in another "
            "cluster's logs (a mirror copies records, not offsets). Nothing was written. "
            "Point bootstrapServers back at the cluster the stream read; to read the new "
            "cluster instead, create a new DeltaIngestion (a new name: its own checkpoint and "
            "transaction id, the same table if its rows belong there) with the startingOffsets "
            "it should begin at, and delete this one.",
        )
    recreated = sorted(
        topic
        for topic, old in recorded.topic_ids.items()
        if topic in current.topic_ids and current.topic_ids[topic] != old
    )
    if recreated:
        ids = ", ".join(
            f"{t} (id {recorded.topic_ids[t]} then, {current.topic_ids[t]} now)" for t in recreated
        )
        raise CheckpointMismatchError(
            "TopicRecreated",
            f"Refusing to start: {ids} was deleted and created again since batch {batch} was "
            "read: the checkpoint's offsets point into a log that is gone, and resuming would "
            "skip the new topic's first records or read others than it planned. Nothing was "
            "written. To read the new topic: create a new DeltaIngestion (a new name: its own "
            "checkpoint and transaction id; the same table if its rows belong there) with "
            "startingOffsets: earliest, and delete this one.",
        )
