"""Ready means the stream makes progress: scenarios of driver reports, lag and time; Degraded
names a consumer group the stream may not commit to."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from deltaflow_api.reasons import ConditionType
from deltaflow_api.v1alpha1 import Condition
from deltaflow_operator.autoscaler.observe import (
    MAX_TEXT_CHARS,
    REPORT_STALE_SECONDS,
    DriverReport,
    parse_pool_report,
    parse_report,
)
from deltaflow_operator.decisions.conditions import condition
from deltaflow_operator.decisions.progress import (
    STALL_SECONDS,
    STARTUP_GRACE_SECONDS,
    group_commit_degraded,
    stall_after_seconds,
    stream_progress,
)
from deltaflow_runtime.executors import ExecutorTotals
from deltaflow_runtime.scaling_agent import driver_report

NOW = 1_800_000_000.0


def report(at: float = NOW - 2, last_batch: int = 7, ago: float | None = 3.0) -> DriverReport:
    return DriverReport(
        at=at,
        query_id="q",
        run_id="r",
        target=1,
        registered=1,
        released=0,
        failed_tasks=0,
        capacity=None,
        last_batch=last_batch,
        last_batch_at=None if ago is None else NOW - ago,
    )


@pytest.mark.parametrize(
    ("scenario", "driver_report", "running_for", "lag", "expected"),
    [
        ("commits while records arrive", report(), 600, 5000, (True, "Streaming")),
        ("idle topic, no batch for an hour", report(ago=3600), 7200, 0, (True, "Streaming")),
        ("idle from the start", report(last_batch=-1, ago=None), 7200, 0, (True, "Streaming")),
        ("just started, no report yet", None, 30, None, (False, "StreamStarting")),
        ("never reported", None, STARTUP_GRACE_SECONDS + 1, 10, (False, "DriverNotReporting")),
        (
            "reports stopped (hung process)",
            report(at=NOW - 120),
            3600,
            10,
            (False, "DriverNotReporting"),
        ),
        (
            "reports but commits nothing while records wait",
            report(ago=STALL_SECONDS + 30),
            3600,
            42_000,
            (False, "StreamStalled"),
        ),
        (
            "no batch since start with a backlog",
            report(last_batch=-1, ago=None),
            STALL_SECONDS + 60,
            1000,
            (False, "StreamStalled"),
        ),
        (
            "quiet and the lag unknown",
            report(ago=STALL_SECONDS + 30),
            3600,
            None,
            (None, "ProgressUnknown"),
        ),
        ("a short pause under the stall window", report(ago=60), 3600, 9000, (True, "Streaming")),
        (
            "reported, then hung, soon after start",
            report(at=NOW - 40),
            60,
            None,
            (False, "DriverNotReporting"),
        ),
    ],
)
def test_ready_follows_progress(
    scenario: str,
    driver_report: DriverReport | None,
    running_for: float,
    lag: int | None,
    expected: tuple[bool | None, str],
) -> None:
    verdict = stream_progress(
        driver_report, running_for=running_for, lag_records=lag, trigger_seconds=5, now=NOW
    )
    assert (verdict.ready, verdict.reason) == expected, scenario


@pytest.mark.parametrize(
    ("trigger", "quiet", "stalled"),
    [
        (5, 125, False),  # a batch's work and two short intervals
        (5, 135, True),
        (60, STALL_SECONDS + 30, False),  # a slow trigger stretches the window ...
        (52, 230, True),  # ... by two intervals: a 60 s target's stall shows within 4 min
        (1, 123, True),
    ],
)
def test_a_stall_is_a_batchs_work_plus_two_intervals_without_a_commit(
    trigger: float, quiet: float, stalled: bool
) -> None:
    verdict = stream_progress(
        report(ago=quiet), running_for=3600, lag_records=10, trigger_seconds=trigger, now=NOW
    )
    assert (verdict.reason == "StreamStalled") is stalled, verdict
    assert verdict.ready is not stalled


def test_the_stall_message_names_the_backlog() -> None:
    verdict = stream_progress(
        report(ago=400), running_for=3600, lag_records=42_000, trigger_seconds=5, now=NOW
    )
    assert "42000 records" in verdict.message
    last_batch = datetime.fromtimestamp(NOW - 400, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert f"since {last_batch}" in verdict.message


@pytest.mark.parametrize(
    ("last_batch_ago", "lag"), [(400, 42_000), (400, None), (5, 10), (None, 10)]
)
def test_a_verdict_reads_the_same_on_every_round_while_nothing_changes(
    last_batch_ago: float | None, lag: int | None
) -> None:
    # Times, not ages: an unchanged stream gives a byte-equal status, so nothing is written.
    def verdict(later: float) -> object:
        reported = report(ago=last_batch_ago)
        v = stream_progress(
            reported, running_for=3600 + later, lag_records=lag, trigger_seconds=5, now=NOW + later
        )
        return v.ready, v.reason, v.message

    assert verdict(0) == verdict(7)


def test_the_report_carries_the_last_batch_time() -> None:
    parsed = parse_report(
        '{"at": 1.0, "target": 1, "registered": 1, "lastBatch": 3, "lastBatchAt": 0.5}'
    )
    assert parsed is not None
    assert (parsed.last_batch, parsed.last_batch_at) == (3, 0.5)
    older = parse_report('{"at": 1.0, "target": 1, "registered": 1}')  # an older runtime
    assert older is not None
    assert older.last_batch_at is None


def test_a_ready_stream_is_looked_at_again_when_its_report_would_go_stale() -> None:
    # A hung driver stops patching its pod, so no watch event announces it: the verdict says
    # when time alone would change it.
    fresh = stream_progress(
        report(at=NOW - 2), running_for=600, lag_records=0, trigger_seconds=5, now=NOW
    )
    assert fresh.recheck_in == pytest.approx(REPORT_STALE_SECONDS - 2)
    quiet = stream_progress(
        report(at=NOW - 1, ago=stall_after_seconds(5) - 10),
        running_for=3600,
        lag_records=50,
        trigger_seconds=5,
        now=NOW,
    )
    assert quiet.recheck_in == pytest.approx(10)  # the stall comes before the staleness
    starting = stream_progress(None, running_for=30, lag_records=None, trigger_seconds=5, now=NOW)
    assert starting.recheck_in == pytest.approx(STARTUP_GRACE_SECONDS - 30)


@pytest.mark.parametrize(
    ("scenario", "caught_up_ago", "stalled"),
    [
        ("records arrived 50 s ago on a topic idle for an hour", 50, False),
        ("just under the stall window since they arrived", stall_after_seconds(5) - 1, False),
        ("waiting longer than the stall window", stall_after_seconds(5) + 1, True),
        ("the operator has not seen the topic caught up (it just started)", None, True),
        ("caught up before the last batch: the batch counts", 7200, True),
    ],
)
def test_a_stall_is_timed_from_when_records_began_to_wait(
    scenario: str, caught_up_ago: float | None, stalled: bool
) -> None:
    verdict = stream_progress(
        report(ago=3600),
        running_for=7200,
        lag_records=250_000,
        trigger_seconds=5,
        now=NOW,
        caught_up_at=None if caught_up_ago is None else NOW - caught_up_ago,
    )
    assert (verdict.reason == "StreamStalled") is stalled, scenario
    if not stalled:  # looked at again by the time the wait would become a stall
        assert caught_up_ago is not None
        assert verdict.recheck_in is not None
        assert verdict.recheck_in <= stall_after_seconds(5) - caught_up_ago + 1e-6


# --- the consumer group: a stream whose offsets cannot be committed there runs Degraded ---------

GROUP_ERROR = (
    "spec.source.auth: the stream's principal may not use Group:deltaflow.data.orders, where it "
    "commits its offsets after each Delta commit (for lag tools and KEDA): grant it Read on the "
    "group (Kafka client: Broker: Group authorization failed)"
)
WHEN = datetime.fromtimestamp(NOW, UTC)


def _degraded(status: str, reason: str, message: str = "") -> list[Condition]:
    return [
        Condition(
            type="Ready", status="True", reason="Streaming", message="", last_transition_time=WHEN
        ),
        Condition(
            type="Degraded",
            status=status,
            reason=reason,
            message=message,
            last_transition_time=WHEN,
        ),
    ]


@pytest.mark.parametrize(
    ("scenario", "before", "error", "expected"),
    [
        ("commits to its group", _degraded("False", "Healthy"), "", ("False", "Healthy")),
        (
            "may not use its group",
            _degraded("False", "Healthy"),
            GROUP_ERROR,
            ("True", "KafkaGroupAuthorizationFailed"),
        ),
        (
            "crash looping says more",
            _degraded("True", "DriverCrashLooping", "failed 3 times"),
            GROUP_ERROR,
            ("True", "DriverCrashLooping"),
        ),
        (
            "no Degraded yet",
            _degraded("False", "Healthy")[:1],
            GROUP_ERROR,
            ("True", "KafkaGroupAuthorizationFailed"),
        ),
    ],
)
def test_a_group_it_may_not_commit_to_degrades_a_running_stream(
    scenario: str, before: list[Condition], error: str, expected: tuple[str, str]
) -> None:
    after = group_commit_degraded(before, error, generation=3, now=WHEN)
    degraded = condition(after, ConditionType.DEGRADED)
    assert degraded is not None, scenario
    assert (degraded.status, degraded.reason) == expected, scenario
    if degraded.reason == "KafkaGroupAuthorizationFailed":
        assert degraded.message == f"the stream runs, but {GROUP_ERROR}"
    # Ready is not the group's business: the stream lands its records.
    assert condition(after, ConditionType.READY) == condition(before, ConditionType.READY)


def test_the_reports_carry_the_group_commit_error_from_the_driver_and_the_pool() -> None:
    published = driver_report(
        at=NOW,
        query_id="q",
        run_id="r",
        last_batch=7,
        last_batch_at=NOW - 1,
        target=1,
        totals=ExecutorTotals(registered=[], cores=0, failed_tasks=0, busy_core_seconds=0.0),
        released=0,
        capacity=None,
        executor_start_seconds=None,
        kafka=None,
        group_commit_problem=GROUP_ERROR,
    )
    parsed = parse_report(json.dumps(published))
    assert parsed is not None
    assert parsed.group_commit_error == GROUP_ERROR
    published.pop("groupCommit")
    assert parse_report(json.dumps(published)).group_commit_error == ""  # type: ignore[union-attr]
    # Anyone who may patch the pod writes the annotation: odd shapes read as no error.
    for odd in ("denied", ["denied"], {"error": None}, {"error": 1}, {"error": ["denied"]}):
        text = json.dumps({**published, "groupCommit": odd})
        assert parse_report(text).group_commit_error == ""  # type: ignore[union-attr]
    member = {"phase": "Running", "failures": 0, "groupCommit": {"error": "x" * 10_000}}
    pool = parse_pool_report(
        json.dumps({"at": NOW, "members": {"data/a": member}}), "data", now=NOW
    )
    assert pool is not None
    assert pool.members["data/a"].group_commit_error == "x" * MAX_TEXT_CHARS
