"""One failure vocabulary: every reason the runtime ends with is the operator's enum."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from deltaflow_api.failures import FailureReason, Termination, restart_helps
from deltaflow_runtime.errors import failure_reason

RUNTIME = Path(__file__).resolve().parents[2] / "spark_runtime" / "deltaflow_runtime"


def test_every_reason_the_runtime_raises_is_in_the_enum() -> None:
    raised = set()
    for source in RUNTIME.glob("*.py"):
        text = source.read_text()
        raised |= set(re.findall(r'(?:MismatchError|RecoveryError)\(\s*"([A-Za-z]+)"', text))
    assert len(raised) >= 10  # the guard's and recover-checkpoint's reasons were found
    for reason in raised:
        FailureReason(reason)  # a reason outside the enum would fail here, not in a pod


@pytest.mark.parametrize(
    ("reason", "helps"),
    [
        (FailureReason.INVALID_SPEC, False),
        (FailureReason.TABLE_BEHIND, False),
        (FailureReason.DATA_LOSS, False),
        (FailureReason.ROUTING_CHANGED, False),
        (FailureReason.BUCKET_NOT_FOUND, False),
        (FailureReason.OBJECT_STORE_UNREACHABLE, True),
        (FailureReason.BATCH_MISMATCH, True),
        (FailureReason.FAILED, True),
    ],
)
def test_only_what_may_pass_by_itself_is_restarted(reason: FailureReason, helps: bool) -> None:
    assert restart_helps(reason) is helps


def test_termination_messages_round_trip_and_unknown_reasons_read_as_failed() -> None:
    t = Termination(FailureReason.TABLE_LOST, "the table is gone")
    assert Termination.parse(t.render()) == t
    parsed = Termination.parse('{"reason": "SomethingNew", "message": "x"}')
    assert parsed == Termination(FailureReason.FAILED, "x")
    assert Termination.parse("java.lang.OutOfMemoryError") is None
    assert Termination.parse(None) is None


def test_errors_raised_in_a_batch_keep_their_reason_through_spark() -> None:
    wrapped = RuntimeError(
        "[STREAM_FAILED] Query terminated with exception: An exception was raised by the Python "
        "Proxy. ... deltaflow_runtime.sink.RoutingChangedError: batch 7 of x was written ..."
    )
    assert failure_reason(wrapped) == FailureReason.ROUTING_CHANGED
    assert failure_reason(ValueError("boom")) == FailureReason.FAILED
