"""What the autoscaler is fed: the driver's capacity measurement, its report, Kafka lag and rates,
and the operator's manual mode and Kafka settings; all without a cluster."""

from __future__ import annotations

import json
from typing import Any

import pytest

from deltaflow_api import DeltaIngestion, channel
from deltaflow_api.v1alpha1 import AutoscalerStatus, RecommendationStatus, ScaleActionStatus
from deltaflow_operator.autoscaler import engine, observe, realizer
from deltaflow_operator.autoscaler.explain import (
    executor_selector,
    history_of,
    history_status,
    with_recent,
)
from deltaflow_operator.autoscaler.observe import OffsetSnapshot, kafka_view, parse_report
from deltaflow_operator.autoscaler.policy import Capacity, History, LastAction, Recommendation
from deltaflow_operator.builders.driver import spark_conf
from deltaflow_operator.decisions.pod import Pod
from deltaflow_operator.settings import Settings
from deltaflow_runtime import pod_channel
from deltaflow_runtime.capacity import (
    BatchSample,
    CapacityMeter,
    ExecutorStartClock,
    effective_parallelism,
)
from deltaflow_runtime.scaling_agent import kafka_report
from support.manifests import valid_manifest


def test_both_sides_use_the_same_annotations() -> None:
    # One owner (deltaflow_api.channel); the operator's reader and writer and the driver's side
    # use its names.
    assert observe.DESIRED_ANNOTATION == pod_channel.DESIRED_ANNOTATION
    assert engine.REPORT_ANNOTATION == pod_channel.REPORT_ANNOTATION
    assert realizer.DESIRED_ANNOTATION == channel.DESIRED_ANNOTATION


@pytest.mark.parametrize(
    ("slots", "partitions", "expected"),
    [(1, 8, 1.0), (3, 8, 8 / 3), (4, 8, 4.0), (7, 8, 4.0), (8, 8, 8.0), (20, 8, 8.0), (3, 0, 3.0)],
)
def test_tasks_run_in_waves(slots: int, partitions: int, expected: float) -> None:
    assert effective_parallelism(slots, partitions) == pytest.approx(expected)


def test_capacity_is_records_per_busy_core_second_and_the_unexplained_wall_time() -> None:
    meter = CapacityMeter(min_batches=3)
    assert meter.capacity() is None
    # 4 partitions on 2 slots: 2 waves, parallelism 2. 10k records took 4 busy core-seconds
    # (2.5k rec/core-s); wall 3 s = 2 s of parallel work + 1 s fixed cost.
    for _ in range(3):
        meter.add(BatchSample(10_000, 3.0, 4.0, slots=2, partitions=4))
    meter.add(BatchSample(0, 0.5, 0.0, slots=2, partitions=4))  # an empty batch says nothing
    capacity = meter.capacity()
    assert capacity is not None
    assert capacity.records_per_core_second == pytest.approx(2500)
    assert capacity.batch_overhead_seconds == pytest.approx(1.0)
    assert capacity.batches == 3


def test_fixed_busy_time_per_batch_is_fitted_out_of_the_rate() -> None:
    # Every batch costs 2 core-seconds whatever its size (log replay, task start-up) plus
    # records / 20k. Small batches alone show only a lower bound: 2k / 2.1 s.
    meter = CapacityMeter(window=30, min_batches=3)
    for _ in range(30):
        meter.add(BatchSample(2000, 2.5, 2.0 + 2000 / 20_000, slots=1, partitions=1))
    lower = meter.capacity()
    assert lower is not None
    assert not lower.fitted
    assert lower.records_per_core_second == pytest.approx(2000 / 2.1)
    # One backlog batch of 300k records shows the slope ...
    meter.add(BatchSample(300_000, 17.5, 2.0 + 300_000 / 20_000, slots=1, partitions=1))
    fitted = meter.capacity()
    assert fitted is not None
    assert fitted.fitted
    assert fitted.records_per_core_second == pytest.approx(20_000, rel=1e-6)
    # ... and keeps it after it left the window of recent batches.
    for _ in range(60):
        meter.add(BatchSample(2000, 2.5, 2.0 + 2000 / 20_000, slots=1, partitions=1))
    kept = meter.capacity()
    assert kept is not None
    assert kept.records_per_core_second == pytest.approx(20_000, rel=1e-6)


def test_a_fit_through_noise_falls_back_to_the_lower_bound() -> None:
    meter = CapacityMeter(min_batches=3)
    # Sizes spread 10x but busy time unrelated to them: no slope to trust.
    for records, busy in ((1000, 3.0), (10_000, 1.0), (5000, 2.5), (2000, 1.2), (9000, 2.9)):
        meter.add(BatchSample(records, busy + 1, busy, slots=1, partitions=1))
    capacity = meter.capacity()
    assert capacity is not None
    assert not capacity.fitted
    assert capacity.records_per_core_second == pytest.approx(27_000 / 10.6)


def test_one_large_batch_among_many_noisy_small_ones_is_enough_for_the_slope() -> None:
    # The node bench's calibration: a core does 34k records/s, a batch costs 1 busy core-second
    # besides; 18 batches of ~4k records with +-0.3 s of noise, then one backlog of 60k. R² is
    # about 0.6 (the small batches' noise is most of the variance) but the slope is ~8 standard
    # errors from zero: fitted, within 20% of the truth, where records / busy time says 3.5k.
    meter = CapacityMeter(window=30, min_batches=3)
    noise = [0.3, -0.25, 0.1, -0.3, 0.2, -0.1, 0.28, -0.22, 0.05, -0.05, 0.3, -0.3, 0.15, -0.15]
    for i in range(18):
        records = 4000 + (i % 5 - 2) * 200
        busy = 1.0 + records / 34_000 + noise[i % len(noise)]
        meter.add(BatchSample(records, busy + 0.5, busy, slots=1, partitions=1))
    lower = meter.capacity()
    assert lower is not None
    assert not lower.fitted
    meter.add(BatchSample(60_000, 3.3, 1.0 + 60_000 / 34_000 + 0.1, slots=1, partitions=1))
    capacity = meter.capacity()
    assert capacity is not None
    assert capacity.fitted
    assert capacity.records_per_core_second == pytest.approx(34_000, rel=0.2)


def test_capacity_window_forgets_old_batches() -> None:
    meter = CapacityMeter(window=3, min_batches=1)
    meter.add(BatchSample(1000, 1.0, 1.0, slots=1, partitions=1))
    for _ in range(3):
        meter.add(BatchSample(4000, 2.0, 1.0, slots=1, partitions=1))
    capacity = meter.capacity()
    assert capacity is not None
    assert capacity.records_per_core_second == pytest.approx(4000)


def test_executor_start_is_timed_from_the_ask_to_the_registration() -> None:
    # The driver's first executor: asked for when the SparkContext started (t=100), registered
    # at t=112, seen by the agent's round at t=115.
    clock = ExecutorStartClock(asked_at=100.0)
    clock.observe(115.0, target=1, registered=1, newest_at=112.0)
    assert clock.seconds == 12.0
    # A scale-up seen at t=200: the rounds wait while the pods start...
    clock.observe(200.0, target=3, registered=1, newest_at=112.0)
    clock.observe(210.0, target=3, registered=2, newest_at=208.0)
    assert clock.seconds == 12.0
    # ...and the last of them registered at t=217.5.
    clock.observe(220.0, target=3, registered=3, newest_at=217.5)
    assert clock.seconds == 17.5
    # A lost executor replaced is a start too.
    clock.observe(300.0, target=3, registered=2, newest_at=217.5)
    clock.observe(310.0, target=3, registered=3, newest_at=309.0)
    assert clock.seconds == 9.0


def test_a_wait_ended_by_a_lower_target_measures_nothing() -> None:
    clock = ExecutorStartClock()
    assert clock.seconds is None  # nothing measured: unknown, not 0
    clock.observe(200.0, target=4, registered=2, newest_at=150.0)
    clock.observe(205.0, target=2, registered=2, newest_at=150.0)
    assert clock.seconds is None
    # Steady rounds measure nothing either.
    clock.observe(210.0, target=2, registered=2, newest_at=150.0)
    assert clock.seconds is None


def _report(**over: object) -> str:
    body: dict[str, object] = {
        "at": 100.0,
        "queryId": "q",
        "runId": "r",
        "target": 2,
        "registered": 1,
        "released": 0,
        "failedTasks": 0,
        "capacity": {"recordsPerCoreSecond": 5000.0, "batchOverheadSeconds": 1.5, "batches": 7},
    }
    body.update(over)
    return json.dumps(body)


def test_report_is_parsed_and_judged_fresh_or_stale() -> None:
    report = parse_report(_report())
    assert report is not None
    assert (report.target, report.registered) == (2, 1)
    assert report.capacity is not None
    assert report.capacity.records_per_core_second == 5000.0
    assert report.capacity.fitted  # a driver that does not say is taken as fitted
    assert report.fresh(110.0)
    assert not report.fresh(100.0 + observe.REPORT_STALE_SECONDS + 1)


@pytest.mark.parametrize(
    "text", [None, "", "not json", "[]", json.dumps({"at": 1}), _report(target="x")]
)
def test_a_broken_report_is_no_report(text: str | None) -> None:
    assert parse_report(text) is None


@pytest.mark.parametrize(
    ("sent", "read"), [(None, None), (0.42, 0.42), (-3, 0.0), (1e9, 1024.0), ("1", "refused")]
)
def test_the_drivers_busy_cores_reach_auto_placement_within_what_a_node_has(
    sent: object, read: object
) -> None:
    report = parse_report(_report(busyCores=sent) if sent is not None else _report())
    if read == "refused":
        assert report is None
    else:
        assert report is not None
        assert report.busy_cores == read


def _parsed_capacity(**fields: object) -> Capacity:
    cap = {"recordsPerCoreSecond": 900.0, "batchOverheadSeconds": 1.0, "batches": 4, **fields}
    report = parse_report(_report(capacity=cap))
    assert report is not None
    assert report.capacity is not None
    return report.capacity


def test_a_lower_bound_capacity_is_reported_as_such() -> None:
    assert not _parsed_capacity(fitted=False).fitted


@pytest.mark.parametrize(("sent", "read"), [(14.5, 14.5), (0, 0.0), (-1, None), ("9", None)])
def test_the_measured_executor_start_reaches_the_policy(sent: object, read: float | None) -> None:
    assert _parsed_capacity(executorStartSeconds=sent).executor_start_seconds == read


def test_a_report_without_measured_capacity_says_unknown_not_zero() -> None:
    for capacity in (None, {"recordsPerCoreSecond": 0, "batchOverheadSeconds": 1, "batches": 3}):
        report = parse_report(_report(capacity=capacity))
        assert report is not None
        assert report.capacity is None


def test_desired_annotation_is_read_from_the_pod() -> None:
    def asked(pod: dict[str, Any]) -> int | None:
        return observe.desired_annotation(Pod.of(pod).annotations)

    pod = {"metadata": {"annotations": {observe.DESIRED_ANNOTATION: "3"}}}
    assert asked(pod) == 3
    assert asked({"metadata": {}}) is None
    assert asked({}) is None
    bad = {"metadata": {"annotations": {observe.DESIRED_ANNOTATION: "three"}}}
    assert asked(bad) is None


def test_lag_and_rates_from_two_snapshots() -> None:
    first = OffsetSnapshot(
        at=0.0, end={("t", 0): 100, ("t", 1): 50}, committed={("t", 0): 100, ("t", 1): 40}
    )
    second = OffsetSnapshot(
        at=10.0, end={("t", 0): 1100, ("t", 1): 150}, committed={("t", 0): 600, ("t", 1): 140}
    )
    assert kafka_view(None, first).arrival_rate is None  # one snapshot: no rate yet
    view = kafka_view(first, second)
    assert view.partitions is not None
    assert [(p.partition, p.lag, p.arrival_rate) for p in view.partitions] == [
        (0, 500, 100.0),
        (1, 10, 10.0),
    ]
    assert view.arrival_rate == pytest.approx(110.0)
    assert view.consumption_rate == pytest.approx(60.0)


def test_rounds_between_rate_measurements_keep_the_per_partition_rates() -> None:
    # The operator reconciles more often than it measures rates: a round in between has fresh
    # lag and the last rates, so the policy can decide instead of calling it Unknown.
    measured = kafka_view(
        OffsetSnapshot(0.0, {("t", 0): 0, ("t", 1): 0}, {("t", 0): 0, ("t", 1): 0}),
        OffsetSnapshot(10.0, {("t", 0): 100, ("t", 1): 50}, {("t", 0): 90, ("t", 1): 50}),
    )
    fresh = kafka_view(
        None, OffsetSnapshot(12.0, {("t", 0): 130, ("t", 1): 60}, {("t", 0): 100, ("t", 1): 60})
    )
    combined = observe.with_rates(fresh.partitions, measured.partitions)
    assert combined is not None
    assert [(p.lag, p.arrival_rate) for p in combined] == [(30, 10.0), (0, 5.0)]


def test_a_partition_never_committed_makes_lag_unknown() -> None:
    snapshot = OffsetSnapshot(at=0.0, end={("t", 0): 10, ("t", 1): 10}, committed={("t", 0): 10})
    assert kafka_view(None, snapshot).partitions is None


def test_the_drivers_kafka_poll_reaches_the_operators_lag_through_the_report() -> None:
    # The operator has no Kafka client: what the driver polled is what the operator sees.
    end = {"orders": {0: 130, 1: 60}, "refunds": {0: 5}}
    committed = {"orders": {0: 100, 1: 60}}
    report = parse_report(_report(kafka=kafka_report(50.0, end, committed)))
    assert report is not None
    assert report.kafka is not None
    assert report.kafka == OffsetSnapshot(
        50.0,
        {("orders", 0): 130, ("orders", 1): 60, ("refunds", 0): 5},
        {("orders", 0): 100, ("orders", 1): 60},
    )
    # A partition the stream never committed: its position, so the lag, is unknown.
    assert kafka_view(None, report.kafka).partitions is None
    later = parse_report(
        _report(kafka=kafka_report(60.0, {"orders": {0: 230}}, {"orders": {0: 150}}))
    )
    assert later is not None
    assert later.kafka is not None
    view = kafka_view(OffsetSnapshot(50.0, {("orders", 0): 130}, {("orders", 0): 100}), later.kafka)
    assert view.partitions is not None
    assert [(p.lag, p.arrival_rate) for p in view.partitions] == [(80, 10.0)]
    assert view.consumption_rate == 5.0


def test_offsets_of_more_partitions_than_a_report_holds_become_an_error_not_partial_lag() -> None:
    many = {f"events-{t}": dict.fromkeys(range(100), 10**12) for t in range(100)}
    part = kafka_report(1.0, many, many)
    assert "end" not in part
    assert "10000 partitions" in part["error"]
    assert "scaling.mode: manual" in part["error"]
    report = parse_report(_report(kafka=part))
    assert report is not None
    assert report.kafka is None
    assert report.kafka_error == part["error"]


def test_a_failed_kafka_poll_is_reported_as_its_error_without_offsets() -> None:
    report = parse_report(_report(kafka={"at": 5.0, "error": "Broker transport failure"}))
    assert report is not None
    assert (report.kafka, report.kafka_error) == (None, "Broker transport failure")
    healthy = parse_report(_report())
    assert healthy is not None
    assert healthy.kafka_error == ""


def test_executors_start_at_the_manual_count_and_dynamic_allocation_stays_off() -> None:
    m = valid_manifest()
    m["spec"]["scaling"].update(mode="manual", executors=3, minExecutors=1, maxExecutors=8)
    ingestion = DeltaIngestion.model_validate(m)
    conf = spark_conf(ingestion, Settings())
    assert conf["spark.executor.instances"] == "3"
    assert conf["spark.dynamicAllocation.enabled"] == "false"
    lag_mode = DeltaIngestion.model_validate(valid_manifest())
    assert spark_conf(lag_mode, Settings())["spark.executor.instances"] == "1"


def test_scale_selector_matches_the_executor_pods_labels() -> None:
    ingestion = DeltaIngestion.model_validate(valid_manifest())
    conf = spark_conf(ingestion, Settings())
    executor_labels = {
        k.removeprefix("spark.kubernetes.executor.label."): v
        for k, v in conf.items()
        if k.startswith("spark.kubernetes.executor.label.")
    }
    selector = dict(part.split("=") for part in executor_selector(ingestion).split(","))
    assert selector == executor_labels


def test_the_policys_memory_survives_the_status_round_trip() -> None:
    # A new leader reads it back from status.autoscaler: every field must come back.
    history = History(
        recommendations=(Recommendation(10.0, 3, 1234.5), Recommendation(20.0, 4, 2000.0)),
        last_action=LastAction(at=15.0, from_executors=1, to_executors=3, expected_rate=9000.0),
        ineffective_since=18.0,
        shortfall_since=17.0,
    )
    stored = AutoscalerStatus(**history_status(history)).model_dump(by_alias=True, mode="json")
    assert history_of(AutoscalerStatus.model_validate(stored)) == history


def test_the_policy_sees_every_rounds_recommendation_though_the_status_is_written_less_often() -> (
    None
):
    # A steady stream's status is written every other minute: the rounds between two writes
    # live in the operator's memory, and a peak among them must still hold a scale-down back.
    def rec(at: float, executors: int, rate: float) -> RecommendationStatus:
        return RecommendationStatus(at=at, executors=executors, arrival_rate=rate)

    action = ScaleActionStatus(at=5.0, from_executors=1, to_executors=3, expected_rate=900.0)
    stored = AutoscalerStatus(
        verdict="Hold", recommendations=[rec(10, 3, 1000), rec(20, 3, 1000)], last_action=action
    )
    recent = (rec(20, 3, 1000), rec(24, 4, 9000), rec(28, 3, 1000))
    merged = with_recent(stored, recent)
    assert [(r.at, r.arrival_rate) for r in merged.recommendations] == [
        (10, 1000), (20, 1000), (24, 9000), (28, 1000)
    ]  # fmt: skip
    assert merged.last_action == action
    assert merged.verdict == "Hold"
    assert max(r.arrival_rate for r in history_of(merged).recommendations) == 9000
    assert with_recent(stored, ()) == stored  # a new leader: the status alone
