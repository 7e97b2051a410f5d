"""The checkpoint guard: which (checkpoint, table) pairs may resume and which are refused."""

from __future__ import annotations

import pytest

from deltaflow_runtime.checkpoint import CheckpointState
from deltaflow_runtime.guard import CheckpointMismatchError, StreamFacts, check_checkpoint
from deltaflow_runtime.table import TableState


def facts(
    checkpoint: CheckpointState,
    table_batch: int | None,
    ours: dict[str, dict[int, int]] | None = None,
    recorded: dict[str, dict[int, int]] | None = None,
) -> StreamFacts:
    return StreamFacts(
        table_path="s3a://lake/orders",
        checkpoint_path="s3a://lake/_checkpoints/data/orders",
        txn_app_id="deltaflow/data/orders",
        checkpoint=checkpoint,
        table=TableState(version=-1 if table_batch is None else 12, stream_batch=table_batch),
        checkpoint_offsets_at_table_batch=ours,
        table_offsets_at_table_batch=recorded,
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
    ("state", "table_batch"),
    [
        (CheckpointState(True, 7, 7), 7),  # clean stop
        (CheckpointState(True, 8, 7), 8),  # killed after the Delta commit, before the checkpoint's
        (CheckpointState(True, 8, 7), 7),  # killed before the Delta commit
        (CheckpointState(True, 9, 9), 7),  # later batches held only dead letters... or were empty
    ],
)
def test_a_matching_checkpoint_resumes(state: CheckpointState, table_batch: int) -> None:
    offsets = {"orders": {0: 10, 1: 12}}
    check_checkpoint(facts(state, table_batch, ours=offsets, recorded=offsets))


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
