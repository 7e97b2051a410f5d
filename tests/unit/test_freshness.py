"""Freshness as the user's knob: the trigger plan (target and measured batch time in, interval
out), the measured ages (a window of batches in, percentiles out), and the Freshness condition
(the driver's report in, the verdict out). Pure: scenario tables, no cluster."""

from __future__ import annotations

import json
from bisect import bisect_right
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from deltaflow_api import DeltaIngestion
from deltaflow_api.cadence import (
    BATCH_TAIL,
    CHECKPOINT_FIT_COST,
    DEFAULT_BATCH_SECONDS,
    MIN_INTERVAL_SECONDS,
    STAGGER_SHARE,
    headroom_seconds,
    judged,
    minimum_target_seconds,
    needs_replan,
    plan_trigger,
    staggered_interval_ms,
    window_seconds,
)
from deltaflow_api.reasons import Reason
from deltaflow_operator.autoscaler.observe import FreshnessReport, parse_report
from deltaflow_operator.decisions.freshness import freshness_verdict, trigger_seconds
from deltaflow_runtime.freshness import (
    BatchAges,
    FreshnessWindow,
    age_quantile,
    ages_at_commit,
    checkpoint_batch_seconds,
    share_younger,
    steady_batch_seconds,
)
from support.manifests import valid_manifest

# target s, measured steady batch s (None: not yet), pinned interval s -> interval s, reachable
PLANS = [
    # The default target: a batch at most every ~46 s before a batch was measured, ~49 s after.
    (60, None, None, 46.0, True),
    (60, 3.0, None, 49.0, True),
    (30, 3.0, None, 22.0, True),
    (10, 3.0, None, 4.0, True),
    # A day's target: batches hours apart (a trickle's cost is its batches).
    (86_400, 3.0, None, 77_755.0, True),
    # Nothing left to wait for records: the shortest interval, and the plan says it cannot hold.
    (5, 3.0, None, MIN_INTERVAL_SECONDS, False),
    (60, 40.0, None, MIN_INTERVAL_SECONDS, False),
    # Less than two seconds of room: tenths of a second.
    (8, 3.6, None, 1.6, True),
    # Pinned: the interval as written; reachable only if it fits the target.
    (60, 3.0, 10.0, 10.0, True),
    (60, 3.0, 55.0, 55.0, False),
    (30, None, 0.5, 0.5, True),
]


@pytest.mark.parametrize(("target", "batch", "pinned", "interval", "reachable"), PLANS)
def test_the_trigger_interval_follows_the_target_and_the_measured_batch_time(
    target: int, batch: float | None, pinned: float | None, interval: float, reachable: bool
) -> None:
    plan = plan_trigger(target, batch, pinned)
    assert plan.interval_seconds == interval
    assert plan.reachable is reachable
    assert plan.pinned is (pinned is not None)
    assert plan.measured is (batch is not None)
    if reachable:
        # A record that just missed a trigger, with a batch of the slow tail, still lands in time.
        assert plan.worst_age_seconds + headroom_seconds(target) <= target + 1e-9
        assert "target needs" not in plan.reason
    elif pinned is None:
        assert f"targetSeconds to {minimum_target_seconds(plan.batch_seconds)} or more" in (
            plan.reason
        )
    else:
        assert "remove trigger.interval" in plan.reason


# target s, steady batch s, log-checkpoint batch s (None: not measured yet) -> interval s
CHECKPOINT_PLANS = [
    # Before one was measured, the checkpoint's batch is taken as slow as an unmeasured batch.
    (10, 1.2, None, 4.0, True),
    # Measured faster than the steady batch's tail: the steady tail plans.
    (10, 1.2, 1.5, 7.0, True),
    (10, 1.2, 2.5, 6.0, True),
    (10, 1.2, 4.6, 4.0, True),
    (60, 3.0, 28.0, 26.0, True),
    # Fitting it would take over twice the batches of the steady plan: the steady plan runs, the
    # checkpoint's batch lands late, and the plan says so and names a target that holds. Neither
    # a busy pool's slow checkpoints (FL2) nor a target too tight shrinks the interval to 1 s.
    (60, 3.0, 30.0, 49.0, False),
    (60, 1.0, 50.0, 52.0, False),
    (10, 1.2, 9.5, 7.0, False),
    # The steady batch itself leaves no room: the shortest interval, unreachable.
    (10, 6.0, 9.5, MIN_INTERVAL_SECONDS, False),
    # Not measured yet: the default is a guess, never given up on (a fast steady batch must not
    # read it as too costly).
    (10, 0.4, None, 4.0, True),
    (8, 1.0, None, 2.0, True),
]


@pytest.mark.parametrize(
    ("target", "batch", "checkpoint", "interval", "reachable"), CHECKPOINT_PLANS
)
def test_the_interval_leaves_room_for_the_batch_that_checkpoints_the_delta_log(
    target: int, batch: float, checkpoint: float | None, interval: float, reachable: bool
) -> None:
    plan = plan_trigger(target, batch, None, checkpoint)
    assert plan.interval_seconds == interval
    assert plan.reachable is reachable
    if reachable:
        # The records the checkpoint's batch holds (a tenth) land within the target too.
        slowest = DEFAULT_BATCH_SECONDS if checkpoint is None else checkpoint
        assert plan.interval_seconds + slowest + headroom_seconds(target) <= target + 1e-9
    else:
        least = minimum_target_seconds(batch, checkpoint)
        assert f"targetSeconds to {least} or more" in plan.reason
        assert plan_trigger(least, batch, None, checkpoint).reachable
    if checkpoint is not None and checkpoint > BATCH_TAIL * batch:
        assert f"{checkpoint:.1f} s when Delta checkpoints the log" in plan.reason


@given(st.floats(min_value=0.0, max_value=3600.0), st.floats(min_value=0.0, max_value=3600.0))
def test_the_least_target_the_message_names_is_the_least_that_holds(
    batch: float, checkpoint: float
) -> None:
    least = minimum_target_seconds(batch)
    assert plan_trigger(least, batch).reachable
    assert least == 1 or not plan_trigger(least - 1, batch).reachable
    least = minimum_target_seconds(batch, checkpoint)
    assert plan_trigger(least, batch, None, checkpoint).reachable
    assert least == 1 or not plan_trigger(least - 1, batch, None, checkpoint).reachable


@given(
    st.integers(min_value=1, max_value=86_400),
    st.floats(min_value=0.0, max_value=600.0),
    st.floats(min_value=0.0, max_value=600.0),
)
def test_a_longer_target_or_a_faster_batch_never_plans_more_batches(
    target: int, batch: float, faster: float
) -> None:
    """Among plans that hold their target, and among those that do not (a plan that gives up
    on the log checkpoint's batch runs fewer batches than one that fits it: that is its point)."""
    plan = plan_trigger(target, batch)
    for other in (plan_trigger(target + 1, batch), plan_trigger(target, min(batch, faster))):
        if other.reachable is plan.reachable:
            assert other.interval_seconds >= plan.interval_seconds
        # Fitting the checkpoint's batch never costs over CHECKPOINT_FIT_COST x the batches of
        # the plan that gives up on it.
        fits, gives_up = (other, plan) if other.reachable else (plan, other)
        if fits.reachable and not gives_up.reachable:
            assert fits.interval_seconds * CHECKPOINT_FIT_COST >= gives_up.interval_seconds - 1


def test_before_any_batch_the_plan_assumes_the_default_batch_time() -> None:
    assert plan_trigger(60, None).batch_seconds == DEFAULT_BATCH_SECONDS
    assert "not measured yet" in plan_trigger(60, None).reason
    assert "not measured" not in plan_trigger(60, 2.0).reason


# running interval, new interval -> restart the query?
REPLANS = [
    (46.0, 49.0, False),  # noise-sized: keep running
    (46.0, 19.0, True),  # batches turned out far slower
    (19.0, 46.0, True),
    (10.0, 12.5, False),
    (10.0, 12.6, True),
]


def test_a_plan_that_gave_up_on_the_checkpoints_batch_moves_only_for_a_change_that_matters() -> (
    None
):
    """It never fits that batch: judged by the steady batch, noise restarts nothing."""
    running, fresh = plan_trigger(60, 3.0, None, 30.0), plan_trigger(60, 3.4, None, 30.0)
    assert not running.reachable
    assert (running.interval_seconds, fresh.interval_seconds) == (49.0, 48.0)
    assert not needs_replan(running, fresh)
    kept = judged(running, fresh)
    assert kept.interval_seconds == 49.0
    assert not kept.reachable
    assert "lands after the 60 s target" in kept.reason
    # A running interval that fits the checkpoint's batch after all is judged reachable.
    shorter = running.__class__(20.0, False, 3.0, True, True, "", 60, 30.0)
    assert judged(shorter, fresh).reachable


@pytest.mark.parametrize(("running", "fresh", "move"), REPLANS)
def test_a_running_stream_moves_only_for_a_change_that_matters(
    running: float, fresh: float, move: bool
) -> None:
    def plan(interval: float, pinned: bool = False) -> Any:
        return plan_trigger(60, None, interval if pinned else None).__class__(
            interval, pinned, 3.0, True, True, ""
        )

    assert needs_replan(plan(running), plan(fresh)) is move
    # A pinned interval is the user's: never moved.
    assert not needs_replan(plan(running, pinned=True), plan(fresh))
    assert not needs_replan(plan(running), plan(fresh, pinned=True))


def spark_batch_starts(interval_ms: int, since_ms: int, until_ms: int) -> list[int]:
    """When Spark's processing-time trigger starts batches: at whole multiples of the interval
    since the epoch (ProcessingTimeExecutor.nextBatchTime)."""
    first = (since_ms // interval_ms + 1) * interval_ms
    return list(range(first, until_ms, interval_ms))


@pytest.mark.parametrize("target", [15, 60, 300])
def test_streams_with_the_same_plan_start_their_batches_apart(target: int) -> None:
    """Twenty pool members planning the same interval: unstaggered, every batch starts with all
    the others; staggered, a batch finds about as many others starting within 2 s as randomly
    placed streams would (20 x 2 s / interval), over an hour that ends in 2027."""
    plan = plan_trigger(target, 3.0)
    members = [f"s3a://lake/_checkpoints/team/orders-{i}" for i in range(20)]
    since = 1_800_000_000_000
    until = since + 3_600_000

    def crowding(intervals: list[int]) -> list[int]:
        starts = sorted(t for ms in intervals for t in spark_batch_starts(ms, since, until))
        # Others whose batch started in the 2 s up to this one's start, or with it.
        return [bisect_right(starts, t) - bisect_right(starts, t - 2_000) - 1 for t in starts]

    lockstep = crowding([round(plan.interval_seconds * 1000)] * len(members))
    staggered = crowding([staggered_interval_ms(plan, key) for key in members])
    assert set(lockstep) == {len(members) - 1}
    random_like = len(members) * 2 / plan.interval_seconds
    assert sum(staggered) / len(staggered) < 1.5 * random_like + 0.5
    assert sorted(staggered)[int(0.99 * len(staggered))] <= 4 * random_like + 2


@given(
    interval=st.floats(min_value=MIN_INTERVAL_SECONDS, max_value=86_400),
    key=st.text(min_size=1, max_size=60),
)
def test_a_staggered_interval_keeps_the_plans_bound_and_is_the_streams_own(
    interval: float, key: str
) -> None:
    plan = plan_trigger(10 * interval, None).__class__(interval, False, 3.0, True, True, "")
    ms = staggered_interval_ms(plan, key)
    planned = round(interval * 1000)
    assert planned * (1 - STAGGER_SHARE) - 1 <= ms <= planned
    assert staggered_interval_ms(plan, key) == ms  # the same across restarts and processes
    # A pinned interval is the user's, run exactly.
    pinned = plan.__class__(interval, True, 3.0, True, True, "")
    assert staggered_interval_ms(pinned, key) == planned


def batch(committed_at: float, youngest: float, oldest: float, rows: int) -> BatchAges:
    return BatchAges(committed_at, youngest, oldest, rows, 2.0)


def test_ages_come_from_the_batchs_oldest_and_newest_kafka_timestamps() -> None:
    ages = ages_at_commit(1_000.0, 950_000, 990_000, 10, 2.0)
    assert ages == BatchAges(1_000.0, 10.0, 50.0, 10, 2.0)
    # A producer clock ahead of the driver's: never a negative age.
    ahead = ages_at_commit(1_000.0, 999_000, 1_005_000, 10, 2.0)
    assert ahead is not None
    assert (ahead.youngest, ahead.oldest) == (0.0, 1.0)
    assert ages_at_commit(1_000.0, None, None, 0, 2.0) is None
    assert ages_at_commit(1_000.0, 950_000, 990_000, 0, 2.0) is None


# batches (youngest, oldest, rows) -> p50, p99
QUANTILES = [
    # One steady batch: ages spread evenly over its stretch.
    ([(10.0, 50.0, 100)], 30.0, 49.6),
    # Same-age records (a single record, or a burst produced at once).
    ([(5.0, 5.0, 1)], 5.0, 5.0),
    # Weighted by rows: the big batch's ages dominate the median.
    ([(0.0, 10.0, 900), (100.0, 110.0, 100)], 5.555_555, 109.0),
    # A catch-up batch of a day-old backlog among fresh ones is the tail.
    # (20 of 1,020 records are old: the p99 is where 10.2 of them are older, 196 s into it.)
    ([(1.0, 2.0, 1_000), (86_000.0, 86_400.0, 20)], 1.51, 86_196.0),
]


@pytest.mark.parametrize(("batches", "p50", "p99"), QUANTILES)
def test_percentiles_weigh_each_batch_by_its_records(
    batches: list[tuple[float, float, int]], p50: float, p99: float
) -> None:
    window = [batch(0.0, y, o, r) for y, o, r in batches]
    assert age_quantile(window, 0.5) == pytest.approx(p50, rel=1e-3)
    assert age_quantile(window, 0.99) == pytest.approx(p99, rel=1e-3)
    assert age_quantile([], 0.5) is None


@given(
    st.lists(
        st.tuples(
            st.floats(0.0, 1e6), st.floats(0.0, 1e6), st.integers(min_value=1, max_value=10**9)
        ),
        min_size=1,
        max_size=20,
    ),
    st.floats(0.01, 0.99),
)
def test_a_quantile_has_that_share_of_records_below_it(
    raw: list[tuple[float, float, int]], q: float
) -> None:
    window = [batch(0.0, min(a, b), max(a, b), rows) for a, b, rows in raw]
    age = age_quantile(window, q)
    assert age is not None
    assert min(b.youngest for b in window) <= age <= max(b.oldest for b in window)
    assert share_younger(window, age) >= q - 1e-6
    assert share_younger(window, age * (1 - 1e-6) - 1e-6) <= q + 1e-6


def test_the_window_forgets_old_batches_and_reports_the_plan_it_runs() -> None:
    window = FreshnessWindow(window_seconds=600.0)
    window.add(batch(1_000.0, 100.0, 200.0, 5))  # gone from the window at 2,000
    for i in range(4):
        window.add(BatchAges(1_500.0 + i, 1.0, 11.0, 10, 1.0 + i))
    body = window.report(2_000.0, plan_trigger(30, None), 30)
    assert body["batches"] == 4
    assert body["records"] == 40
    assert body["p50Seconds"] == pytest.approx(6.0, abs=0.01)
    assert body["p99Seconds"] == pytest.approx(10.9, abs=0.01)
    assert body["batchSeconds"] == 2.0  # the smaller half's median (the old batch counts)
    assert body["batchSecondsMeasured"] is False  # the plan given was made before any batch
    assert body["triggerSeconds"] == plan_trigger(30, None).interval_seconds
    assert body["triggerPinned"] is False
    # The operator reads back what the driver writes.
    parsed = parse_report(json.dumps({**REPORT, "freshness": body}))
    assert parsed is not None
    assert parsed.freshness is not None
    assert parsed.freshness.p99_seconds == body["p99Seconds"]
    assert parsed.freshness.trigger_seconds == body["triggerSeconds"]


def test_the_planned_batch_time_is_a_steady_batchs_not_a_bursts() -> None:
    assert steady_batch_seconds([batch(0.0, 1.0, 2.0, 1)] * 4) is None  # too few to say
    steady = [BatchAges(0.0, 1.0, 2.0, 50, 2.0 + 0.1 * (i % 3)) for i in range(30)]
    assert steady_batch_seconds(steady) == pytest.approx(2.1)
    # A catch-up of ten 500k-record batches at 25 s each does not move it...
    burst = [BatchAges(0.0, 60.0, 90.0, 500_000, 25.0)] * 10
    assert steady_batch_seconds(steady + burst) == pytest.approx(2.1)
    # ...while batches that all got slower do, within the recent batches.
    slower = [BatchAges(0.0, 1.0, 2.0, 50, 6.0)] * 50
    assert steady_batch_seconds(steady + slower) == 6.0
    # One batch in ten checkpoints the Delta log: planned for on its own, not as the steady one.
    checkpoints = [BatchAges(0.0, 1.0, 2.0, 50, t, log_checkpoint=True) for t in (4.0, 5.5, 4.2)]
    mixed = steady[:9] + checkpoints[:1] + steady[9:18] + checkpoints[1:2] + steady[18:27]
    mixed += checkpoints[2:]
    assert steady_batch_seconds(mixed) == pytest.approx(2.1)
    assert checkpoint_batch_seconds(mixed) == 5.5
    assert checkpoint_batch_seconds(steady) is None


@pytest.mark.parametrize(
    ("target", "window"), [(1, 60.0), (10, 60.0), (30, 90.0), (60, 180.0), (86_400, 86_400.0)]
)
def test_the_window_spans_three_targets_within_a_minute_and_a_day(
    target: int, window: float
) -> None:
    assert window_seconds(target) == window


REPORT: dict[str, Any] = {
    "at": 1_700_000_000.0,
    "queryId": "q",
    "runId": "r",
    "target": 1,
    "registered": 1,
}
FRESHNESS: dict[str, Any] = {
    "targetSeconds": 30,
    "windowSeconds": 600.0,
    "batches": 3,
    "records": 30,
    "triggerSeconds": 22.0,
    "triggerPinned": False,
    "reachable": True,
    "plan": "a batch every 22 s at most",
    "p50Seconds": 12.0,
    "p99Seconds": 24.0,
}


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"p99Seconds": -1}, "freshness.p99Seconds is -1, outside"),
        ({"p99Seconds": "soon"}, "not a number"),
        ({"triggerSeconds": 1e9}, "freshness.triggerSeconds"),
        ({"batches": -2}, "freshness.batches"),
        ({"windowSeconds": None}, "freshness.windowSeconds"),
    ],
)
def test_a_freshness_part_with_impossible_figures_is_left_out_and_the_report_kept(
    change: dict[str, Any], why: str
) -> None:
    from deltaflow_operator.autoscaler.observe import RefusedReportError, _freshness, _parse

    body = {**FRESHNESS, **change}
    if change.get("windowSeconds", 0) is None:
        del body["windowSeconds"]
    with pytest.raises(RefusedReportError, match=why.split(" is", maxsplit=1)[0]):
        _freshness(json.loads(json.dumps(body)))
    # What the autoscaler and Ready act on still counts; only the freshness is unknown.
    for part in (body, "fast"):
        report = _parse(json.dumps({**REPORT, "freshness": part}))
        assert (report.freshness, report.target) == (None, 1)


def spec(target: int = 30, interval: str | None = None) -> Any:
    manifest = valid_manifest()
    manifest["spec"]["freshness"] = {"targetSeconds": target}
    del manifest["spec"]["scaling"]["targetLagSeconds"]
    if interval is None:
        manifest["spec"].pop("trigger", None)
    else:
        manifest["spec"]["trigger"] = {"interval": interval}
    return DeltaIngestion.model_validate(manifest).spec


def fresh(**over: Any) -> FreshnessReport:
    base = FreshnessReport(
        window_seconds=600.0,
        batches=10,
        records=100,
        trigger_seconds=22.0,
        trigger_pinned=False,
        batch_seconds_measured=True,
        reachable=True,
        plan="a batch every 22 s at most: batches take 3.0 s, within a 30 s target",
        p50_seconds=12.0,
        p99_seconds=24.0,
        batch_seconds=3.0,
    )
    return FreshnessReport(**{**base.__dict__, **over})


# report (None: no driver), reporting, backlog age (s) -> condition status, reason, message words
EMPTY = {"records": 0, "batches": 0, "p50_seconds": None, "p99_seconds": None}
VERDICTS = [
    (fresh(), True, 8.0, True, Reason.ON_TARGET, "p99 age 24 s within the 30 s target"),
    (fresh(p99_seconds=41.0), True, 8.0, False, Reason.BEHIND_TARGET, "the stream was behind"),
    # Records already waiting longer than the target: late now, whatever landed before.
    (fresh(), True, 95.0, False, Reason.BEHIND_TARGET, "records wait in Kafka for about 95 s"),
    (fresh(**EMPTY), True, 95.0, False, Reason.BEHIND_TARGET, "over the 30 s target"),
    (
        fresh(p99_seconds=41.0, reachable=False, plan="batches take 25 s: set ..."),
        True,
        8.0,
        False,
        Reason.TARGET_UNREACHABLE,
        "p99 age 41 s over the last 600 s: batches take 25 s",
    ),
    # Said before a record shows it: a measured batch time predicts it...
    (fresh(**EMPTY, reachable=False), True, None, False, Reason.TARGET_UNREACHABLE, "a batch"),
    # ...but not the default batch time of a driver that has measured none (a guess).
    (
        fresh(**EMPTY, reachable=False, batch_seconds_measured=False),
        True,
        None,
        None,
        Reason.NO_RECENT_RECORDS,
        "no record landed in the last 600 s",
    ),
    # Measured fine although the plan feared otherwise: the measurement wins.
    (fresh(reachable=False), True, None, True, Reason.ON_TARGET, "within the 30 s target"),
    (fresh(**EMPTY), True, 0.0, None, Reason.NO_RECENT_RECORDS, "an idle topic runs no batch"),
    (None, False, None, None, Reason.DRIVER_NOT_REPORTING, "does not report"),
    (fresh(), False, 8.0, None, Reason.DRIVER_NOT_REPORTING, "does not report"),
]


@pytest.mark.parametrize(("report", "reporting", "lag", "holds", "reason", "words"), VERDICTS)
def test_the_freshness_condition_says_whether_the_target_holds_and_why_not(  # noqa: PLR0917
    report: FreshnessReport | None,
    reporting: bool,
    lag: float | None,
    holds: bool | None,
    reason: Reason,
    words: str,
) -> None:
    verdict = freshness_verdict(
        spec(30), report, reporting=reporting, lag_seconds=lag, now=1_700_000_000.0
    )
    assert (verdict.holds, verdict.reason) == (holds, reason)
    assert words in verdict.message
    assert verdict.status.target_seconds == 30
    if report is not None and reporting:
        assert verdict.status.p99_seconds == report.p99_seconds
        assert verdict.status.trigger_seconds == report.trigger_seconds


def test_one_knob_the_lag_target_and_the_trigger_follow_the_freshness_target() -> None:
    assert spec(45).target_lag_seconds == 45
    manifest = valid_manifest()
    manifest["spec"]["freshness"] = {"targetSeconds": 45}
    pinned = DeltaIngestion.model_validate(manifest).spec
    assert pinned.target_lag_seconds == 60  # spec.scaling.targetLagSeconds, when set, wins
    # The autoscaler models batches at the interval the driver runs, else at the one it plans.
    assert trigger_seconds(spec(30), None) == plan_trigger(30, None).interval_seconds
    assert trigger_seconds(spec(30, "10s"), None) == 10.0
    assert trigger_seconds(spec(30), fresh(trigger_seconds=7.0)) == 7.0
    assert BATCH_TAIL > 1


def test_a_running_interval_that_no_longer_fits_moves_at_once_and_the_status_judges_it() -> None:
    running = plan_trigger(60, 3.0)  # 49 s
    slower = plan_trigger(60, 9.0)  # 40 s: within the 25% band, but 49 + 9 + 6 > 60
    assert running.interval_seconds == 49.0
    assert slower.interval_seconds == 40.0
    assert needs_replan(running, slower)
    # Slightly slower batches that still fit: no restart, and the status judges the running one.
    noisy = plan_trigger(60, 3.4)
    assert noisy.interval_seconds == 48.0
    assert not needs_replan(running, noisy)
    kept = judged(running, noisy)
    assert (kept.interval_seconds, kept.reachable, kept.measured) == (49.0, True, True)
    assert "batches take 3.4 s" in kept.reason
    # A pinned interval is judged at the measured batch time, never moved.
    pinned = plan_trigger(60, None, 55.0)
    assert "not measured" in pinned.reason
    measured = plan_trigger(60, 4.0, 55.0)
    assert not needs_replan(pinned, measured)
    assert judged(pinned, measured) == measured
    assert not measured.reachable
    assert measured.measured


def test_records_without_a_kafka_timestamp_say_nothing_of_freshness() -> None:
    assert ages_at_commit(1_000.0, -1, 990_000, 10, 2.0) is None
    assert ages_at_commit(1_000.0, 0, 990_000, 10, 2.0) is None
