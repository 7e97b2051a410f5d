"""The checkpoint guard: which (checkpoint, table) pairs may resume and which are refused."""

from __future__ import annotations

import pytest

from deltaflow_runtime.checkpoint import CheckpointState
from deltaflow_runtime.guard import (
    CheckpointMismatchError,
    StreamFacts,
    check_checkpoint,
    check_kafka_identity,
)
from deltaflow_runtime.kafka_admin import KafkaIdentity
from deltaflow_runtime.table import StreamCommit, TableState


def facts(
    checkpoint: CheckpointState,
    table_batch: int | None,
    ours: dict[str, dict[int, int]] | None = None,
    recorded: dict[str, dict[int, int]] | None = None,
    *,
    dead_letter_batch: int | None = None,
    last_commit: StreamCommit | None = None,
) -> StreamFacts:
    return StreamFacts(
        table_path="s3a://lake/orders",
        checkpoint_path="s3a://lake/_checkpoints/data/orders",
        txn_app_id="deltaflow/data/orders",
        checkpoint=checkpoint,
        table=TableState(version=-1 if table_batch is None else 12, stream_batch=table_batch),
        dead_letter_table_path="s3a://lake/orders_dead_letter",
        dead_letter=TableState(
            version=-1 if dead_letter_batch is None else 3, stream_batch=dead_letter_batch
        ),
        checkpoint_offsets_at_table_batch=ours,
        table_offsets_at_table_batch=recorded,
        last_commit=last_commit,
    )


FRESH = CheckpointState(False, None, None)


@pytest.mark.parametrize(
    "state",
    [
        FRESH,  # a new stream
        CheckpointState(True, None, None),  # an empty checkpoint directory
        CheckpointState(True, 0, None),  # first batch planned, never written
    ],
)
def test_a_new_stream_starts(state: CheckpointState) -> None:
    check_checkpoint(facts(state, table_batch=None))


@pytest.mark.parametrize(
    ("state", "table_batch", "dead_letter_batch"),
    [
        (CheckpointState(True, 7, 7), 7, None),  # clean stop
        (CheckpointState(True, 7, 7), 7, 7),  # clean stop, dead letters in the last batch
        (CheckpointState(True, 8, 7), 8, 5),  # killed after the table commit, before the rest
        (CheckpointState(True, 8, 7), 8, 8),  # killed after the dead-letter commit
        (CheckpointState(True, 8, 7), 7, None),  # killed before the table commit
    ],
)
def test_a_matching_checkpoint_resumes(
    state: CheckpointState, table_batch: int, dead_letter_batch: int | None
) -> None:
    offsets = {"orders": {0: 10, 1: 12}}
    check_checkpoint(
        facts(state, table_batch, offsets, offsets, dead_letter_batch=dead_letter_batch)
    )


def test_a_table_rolled_back_under_its_checkpoint_is_refused() -> None:
    # RESTORE TABLE to an older version: the checkpoint resumes after batch 9, the table ends at 6.
    with pytest.raises(CheckpointMismatchError) as refused:
        check_checkpoint(facts(CheckpointState(True, 9, 9), table_batch=6), config_hint="x.yaml")
    assert refused.value.reason == "TableBehind"
    message = str(refused.value)
    assert "batches 7 to 9 are no longer in it" in message
    assert "deltaflow recover-checkpoint --config x.yaml" in message


def test_a_table_restored_to_before_the_stream_s_last_batch_is_refused() -> None:
    # RESTORE keeps the stream's transaction id (batch 9) while taking its rows back to batch 6.
    restored = StreamCommit(batch=6, version=8, entry={}, restore_version=12, restored_to=8)
    with pytest.raises(CheckpointMismatchError) as refused:
        check_checkpoint(facts(CheckpointState(True, 9, 9), 9, last_commit=restored))
    assert refused.value.reason == "TableBehind"
    message = str(refused.value)
    assert "batches 7 to 9" in message
    assert "RESTORE TABLE delta.`s3a://lake/orders` TO VERSION AS OF 11" in message


def test_a_restore_that_keeps_the_stream_s_last_batch_resumes() -> None:
    # e.g. the restore undone by a second one, or a restore to after the stream's last commit
    kept = StreamCommit(batch=9, version=10, entry={}, restore_version=13, restored_to=10)
    check_checkpoint(facts(CheckpointState(True, 9, 9), 9, last_commit=kept))


@pytest.mark.parametrize(
    ("table_batch", "dead_letter_batch"),
    [
        (None, 4),  # the table was deleted, its dead-letter table was not
        (3, 4),  # the table was restored to before the dead-letter table's last batch
    ],
)
def test_a_dead_letter_table_ahead_of_its_table_is_refused(
    table_batch: int | None, dead_letter_batch: int
) -> None:
    # Following the TableLost advice (a new checkpoint) next to the old dead-letter table would
    # make Delta skip the new stream's dead letters as already written.
    with pytest.raises(CheckpointMismatchError) as refused:
        check_checkpoint(facts(FRESH, table_batch, dead_letter_batch=dead_letter_batch))
    assert refused.value.reason == "DeadLetterTableAhead"
    assert "s3a://lake/orders_dead_letter" in str(refused.value)


def test_a_lost_checkpoint_is_refused_with_the_way_back() -> None:
    with pytest.raises(CheckpointMismatchError) as refused:
        check_checkpoint(facts(FRESH, table_batch=41), config_hint="/etc/deltaflow/ingestion.yaml")
    error = refused.value
    assert error.reason == "CheckpointLost"
    text = str(error)
    assert "holds this stream's transactions up to batch 41" in text
    assert "does not exist" in text
    assert "silent loss" in text
    assert "duplicates" in text
    assert "deltaflow recover-checkpoint --config /etc/deltaflow/ingestion.yaml" in text
    assert "restore the checkpoint directory from a backup" in text
    assert "Nothing was written" in text


def test_an_emptied_checkpoint_is_refused() -> None:
    with pytest.raises(CheckpointMismatchError, match="holds no batches"):
        check_checkpoint(facts(CheckpointState(True, None, None), table_batch=3))


def test_an_older_checkpoint_is_refused() -> None:
    with pytest.raises(CheckpointMismatchError) as refused:
        check_checkpoint(facts(CheckpointState(True, 5, 5), table_batch=9))
    assert refused.value.reason == "CheckpointBehind"
    assert "ends at batch 5" in str(refused.value)


def test_a_foreign_checkpoint_is_refused() -> None:
    with pytest.raises(CheckpointMismatchError) as refused:
        check_checkpoint(
            facts(
                CheckpointState(True, 9, 9),
                table_batch=9,
                ours={"orders": {0: 100}},
                recorded={"orders": {0: 250}},
            )
        )
    assert refused.value.reason == "CheckpointMismatch"
    assert '{"orders":{"0":100}}' in str(refused.value)
    assert '{"orders":{"0":250}}' in str(refused.value)


def test_a_lost_table_is_refused() -> None:
    with pytest.raises(CheckpointMismatchError) as refused:
        check_checkpoint(facts(CheckpointState(True, 4, 4), table_batch=None))
    assert refused.value.reason == "TableLost"
    assert "deleted or replaced" in str(refused.value)
    assert "and the dead-letter table s3a://lake/orders_dead_letter" in str(refused.value)


OLD = KafkaIdentity("cluster-a", {"orders": "id-1", "refunds": "id-2"})


@pytest.mark.parametrize(
    ("current", "refused"),
    [
        (KafkaIdentity("cluster-a", {"orders": "id-1", "refunds": "id-2"}), None),
        # A topic gone altogether (a pattern's topic deleted) is Spark's to handle.
        (KafkaIdentity("cluster-a", {"orders": "id-1"}), None),
        # Unknown on either side: nothing to compare.
        (KafkaIdentity(None, {"orders": "id-1", "refunds": "id-2"}), None),
        (KafkaIdentity("cluster-a", {"orders": "id-1", "refunds": "id-9"}), "TopicRecreated"),
        (KafkaIdentity("cluster-b", {"orders": "id-1", "refunds": "id-2"}), "KafkaClusterChanged"),
        # Another cluster whose topic has the same name: the cluster is named first.
        (KafkaIdentity("cluster-b", {"orders": "id-7"}), "KafkaClusterChanged"),
    ],
)
def test_a_stream_resumes_only_in_the_kafka_its_offsets_were_read_from(
    current: KafkaIdentity, refused: str | None
) -> None:
    if refused is None:
        check_kafka_identity(OLD, current, 41, "kafka:9092")
        return
    with pytest.raises(CheckpointMismatchError) as error:
        check_kafka_identity(OLD, current, 41, "kafka:9092")
    assert error.value.reason.value == refused
    assert "batch 41" in str(error.value)
    assert "create a new DeltaIngestion" in str(error.value)


def test_the_identity_round_trips_through_a_commit_entry() -> None:
    entry = {"batchId": 3, KafkaIdentity.KEY: OLD.render()}
    assert KafkaIdentity.recorded(entry) == OLD
    assert KafkaIdentity.recorded({"batchId": 3}) is None  # an older runtime's commit
    assert OLD.only(["orders", "gone"]) == KafkaIdentity("cluster-a", {"orders": "id-1"})
    assert OLD.covers(["orders", "refunds"])
    assert not OLD.covers(["orders", "new"])
