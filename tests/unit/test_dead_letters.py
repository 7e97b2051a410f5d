"""The dead-letter ledger's invariant: a dead-letter commit under version V means every batch up
to V has its dead letters in the table; never a commit that hides a batch's own, never the same
rows twice."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from deltaflow_runtime.dead_letters import DeadLetterLedger


def _ledger(table_batch: int = -1) -> DeadLetterLedger:
    return DeadLetterLedger(
        table_batch=table_batch, committed_version=None, flush_seconds=60.0, flush_rows=100
    )


def _rows(n: int) -> tuple[str, ...]:
    return tuple(f"r{i}" for i in range(n))


@dataclass(frozen=True)
class Step:
    """A batch's table commit: its refused records, collected inline or left to a second read."""

    batch: int
    refused: int
    inline: bool


@pytest.mark.parametrize(
    ("steps", "upto", "version", "batches"),
    [
        # Inline dead letters of 3 and 4 wait; the table holds 4: commit under 4.
        ([Step(3, 2, True), Step(4, 1, True)], None, 4, [3, 4]),
        # Batch 5's own dead letters are on their way from Kafka (settling): the waiting ones
        # go under 4, or Delta would skip batch 5's own commit as already done (lost).
        ([Step(3, 2, True), Step(4, 1, True), Step(5, 900, False)], None, 4, [3, 4]),
        # A clean batch after them moves nothing: 5 holds no dead letters.
        ([Step(3, 2, True), Step(5, 0, False)], None, 5, [3]),
        # The writer's own "the earlier batches first" names the version.
        ([Step(3, 2, True), Step(4, 7, False)], 3, 3, [3]),
    ],
)
def test_waiting_dead_letters_commit_under_the_last_batch_that_has_all_of_its_own(
    steps: list[Step], upto: int | None, version: int, batches: list[int]
) -> None:
    ledger = _ledger()
    for step in steps:
        inline = _rows(step.refused) if step.inline else None
        ledger.table_committed(step.batch, refused=step.refused, inline=inline, now=0.0)
    flush = ledger.plan(upto=upto, due_only=False, now=0.0)
    assert flush is not None
    assert (flush.version, flush.batch_ids) == (version, batches)


def test_a_settled_batch_lets_later_commits_claim_its_version() -> None:
    ledger = _ledger()
    ledger.table_committed(5, refused=900, inline=None, now=0.0)
    ledger.settled(5)
    ledger.table_committed(6, refused=1, inline=_rows(1), now=0.0)
    flush = ledger.plan(upto=None, due_only=False, now=0.0)
    assert flush is not None
    assert flush.version == 6
    assert ledger.committed_version == 5


@pytest.mark.parametrize(
    ("landed_version", "written_again"),
    [
        (7, False),  # the attempt landed although it reported a failure: never again
        (None, True),  # nothing landed: retried, with what waits by then
        (5, True),  # an older commit is the table's last: the attempt did not land
    ],
)
def test_an_attempt_in_doubt_is_settled_by_the_table_before_any_retry(
    landed_version: int | None, written_again: bool
) -> None:
    ledger = _ledger()
    ledger.table_committed(6, refused=2, inline=_rows(2), now=0.0)
    ledger.table_committed(7, refused=3, inline=_rows(3), now=0.0)
    first = ledger.plan(upto=None, due_only=False, now=0.0)
    assert first is not None
    assert first.version == 7
    # The commit raised; meanwhile batch 8 committed its table rows with one dead letter.
    ledger.table_committed(8, refused=1, inline=_rows(1), now=1.0)
    with pytest.raises(RuntimeError, match="in doubt"):
        ledger.plan(upto=None, due_only=False, now=1.0)
    assert ledger.resolve(landed_version) is (not written_again)
    retry = ledger.plan(upto=None, due_only=False, now=1.0)
    assert retry is not None
    assert retry.version == 8
    assert retry.batch_ids == ([6, 7, 8] if written_again else [8])
    assert retry.rows == (6 if written_again else 1)


@pytest.mark.parametrize(
    ("waited", "rows", "due"),
    [(10.0, 5, False), (60.0, 5, True), (1.0, 100, True), (0.0, 99, False)],
)
def test_waiting_dead_letters_are_due_after_their_time_or_their_weight(
    waited: float, rows: int, due: bool
) -> None:
    ledger = _ledger()
    ledger.table_committed(1, refused=rows, inline=_rows(rows), now=100.0)
    assert (ledger.plan(upto=None, due_only=True, now=100.0 + waited) is not None) is due


def test_a_commit_that_landed_empties_the_ledger() -> None:
    ledger = _ledger()
    ledger.table_committed(1, refused=2, inline=_rows(2), now=0.0)
    flush = ledger.plan(upto=None, due_only=False, now=0.0)
    assert flush is not None
    ledger.landed(flush)
    assert ledger.waiting == []
    assert ledger.waiting_rows == 0
    assert ledger.in_doubt is None
    assert ledger.plan(upto=None, due_only=False, now=0.0) is None
    assert ledger.committed_version == 1
