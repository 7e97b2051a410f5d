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
from deltaflow_runtime.table import TableState


class CheckpointMismatchError(Exception):
    """The checkpoint does not belong with the table; the message says how to recover."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason  # CheckpointLost | CheckpointBehind | CheckpointMismatch | TableLost


@dataclass(frozen=True)
class StreamFacts:
    """What the checkpoint and the table say, gathered at start."""

    table_path: str
    checkpoint_path: str
    txn_app_id: str
    checkpoint: CheckpointState
    table: TableState
    # offsets/<table batch> in the checkpoint, and the end offsets the table recorded for it
    checkpoint_offsets_at_table_batch: TopicOffsets | None = None
    table_offsets_at_table_batch: TopicOffsets | None = None


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
    """Raise :class:`CheckpointMismatchError` unless the checkpoint can safely resume the table."""
    cp, table = facts.checkpoint, facts.table
    batch = table.stream_batch
    if batch is None:
        if cp.latest_committed is not None:
            raise CheckpointMismatchError(
                "TableLost",
                f"Refusing to start: the checkpoint {facts.checkpoint_path} has committed batches "
                f"up to {cp.latest_committed}, but the table {facts.table_path} holds no "
                f"transaction of this stream (txnAppId {facts.txn_app_id}): the table was "
                "deleted or replaced, and resuming would leave out everything before. Restore the "
                "table, or delete the checkpoint to re-ingest from spec.source.startingOffsets.",
            )
        return
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
    ours, recorded = facts.checkpoint_offsets_at_table_batch, facts.table_offsets_at_table_batch
    if ours is not None and recorded is not None and ours != recorded:
        raise CheckpointMismatchError(
            "CheckpointMismatch",
            head + f"planned batch {batch} with end offsets {render_offsets(ours)} while the "
            f"table recorded {render_offsets(recorded)}: the checkpoint belongs to another "
            "stream or run." + consequence + _recovery(facts, config_hint),
        )
