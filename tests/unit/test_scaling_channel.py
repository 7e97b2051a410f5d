"""The scaling channel is the driver pod's annotations, which anyone who may patch the pod can
write: the driver runs no executor count outside the spec's bounds, and the operator takes the
driver's report as a claim (what it accepts, refuses, and believes of it); all without a cluster."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from deltaflow_api import DeltaIngestion
from deltaflow_api.v1alpha1 import (
    AutoscalerStatus,
    CapacityStatus,
    DeltaIngestionStatus,
    ExecutorStatus,
)
from deltaflow_operator.autoscaler.explain import history_status, lag_status
from deltaflow_operator.autoscaler.observe import (
    CLOCK_SKEW_SECONDS,
    REPORT_STALE_SECONDS,
    ReportReading,
    Sighting,
    kafka_view,
    parse_report,
    read_report,
)
from deltaflow_operator.autoscaler.policy import History, Limits, Observation, decide
from deltaflow_operator.builders import driver as builders
from deltaflow_operator.builders.maintenance import maintenance_cronjob
from deltaflow_operator.decisions.progress import stream_progress
from deltaflow_operator.settings import Settings
from deltaflow_runtime.scaling_agent import SpecBounds, clamp_target
from support.manifests import valid_manifest

NOW = 1_800_000_000.0
STARTED = NOW - 3600  # the driver container's start


@pytest.mark.parametrize(
    ("scenario", "asked", "bounds", "runs"),
    [
        ("within the bounds", 3, (1, 4), 3),
        ("at the maximum", 4, (1, 4), 4),
        ("a hand-written thousand", 1000, (1, 4), 4),
        ("more than any int64", 10**30, (2, 8), 8),
        ("zero", 0, (2, 8), 2),
        ("negative", -5, (1, 4), 1),
        ("manual mode's fixed bounds", 9, (3, 3), 3),
    ],
)
def test_the_driver_runs_no_executor_count_outside_the_specs_bounds(
    scenario: str, asked: int, bounds: tuple[int, int], runs: int
) -> None:
    assert clamp_target(asked, bounds) == runs, scenario


def test_bounds_changed_in_place_reach_the_running_driver(tmp_path: Path) -> None:
    # The operator rewrites the ConfigMap for new bounds (no new driver); the kubelet replaces
    # the mounted file. A file that cannot be read keeps the bounds last read.
    config = tmp_path / "ingestion.yaml"
    manifest = valid_manifest()

    def write(scaling: dict[str, Any] | None, text: str | None = None) -> None:
        manifest["spec"]["scaling"] = scaling or {}
        fresh = tmp_path / "next.yaml"  # a new file, as the kubelet swaps one in
        fresh.write_text(text if text is not None else yaml.safe_dump(manifest))
        fresh.replace(config)

    write({"minExecutors": 1, "maxExecutors": 4})
    bounds = SpecBounds(config, (1, 4))
    assert bounds() == (1, 4)
    write({"minExecutors": 2, "maxExecutors": 20})
    assert bounds() == (2, 20)
    write(None, text="spec: [not, a, DeltaIngestion]")
    assert bounds() == (2, 20)
    config.unlink()
    assert bounds() == (2, 20)
    assert SpecBounds(None, (1, 3))() == (1, 3)  # no config file (not on a driver pod)


def test_pods_never_carry_the_users_annotations_under_the_operators_prefix() -> None:
    # Admission refuses them; a resource stored before that rule may still hold them, and a
    # preset deltaflow.io/executors-desired or driver-report would reach the scaling channel.
    manifest = valid_manifest()
    manifest["metadata"]["uid"] = "u1"
    ingestion = DeltaIngestion.model_validate(manifest)
    reserved = {
        "deltaflow.io/executors-desired": "1000",
        "deltaflow.io/driver-report": json.dumps(report(at=NOW + 10**9)),
        "scaling.deltaflow.io/anything": "x",
    }
    for options in (ingestion.spec.driver.pod, ingestion.spec.executor.pod):
        options.annotations.update({**reserved, "team": "payments", "deltaflow.iox/free": "y"})
    settings = Settings()
    pods = {
        "driver": builders.driver_pod(ingestion, settings)["metadata"]["annotations"],
        "executor": builders.executor_pod_template(ingestion)["metadata"]["annotations"],
        "maintenance": maintenance_cronjob(ingestion, settings, "optimize")["spec"]["jobTemplate"][
            "spec"
        ]["template"]["metadata"]["annotations"],
    }
    for role, written in pods.items():
        assert not set(reserved) & set(written), role
        assert written["team"] == "payments", role
        assert written["deltaflow.iox/free"] == "y", role  # another domain: the user's


def report(**over: Any) -> dict[str, Any]:
    """What a healthy driver publishes (scaling_agent.ScalingAgent.step), with ``over``."""
    body: dict[str, Any] = {
        "at": NOW - 2,
        "queryId": "q",
        "runId": "r",
        "lastBatch": 7,
        "lastBatchAt": NOW - 3,
        "target": 2,
        "registered": 2,
        "released": 0,
        "failedTasks": 0,
        "capacity": {"recordsPerCoreSecond": 5000.0, "batchOverheadSeconds": 1.5, "batches": 7},
        "kafka": {
            "at": NOW - 4,
            "end": {"orders": {"0": 130}},
            "committed": {"orders": {"0": 100}},
        },
    }
    body.update(over)
    return body


def kafka(**over: Any) -> dict[str, Any]:
    part: dict[str, Any] = report()["kafka"]
    part.update(over)
    return part


def read(text: str, now: float = NOW, seen: Sighting | None = None) -> ReportReading:
    return read_report(text, now=now, seen=seen, started_at=STARTED)


@pytest.mark.parametrize(
    ("scenario", "text", "refusal"),
    [
        ("not JSON", "{", "not JSON"),
        ("nested deeper than the parser goes", "[" * 100_000 + "]" * 100_000, "not JSON"),
        ("a list", "[]", "not a JSON object"),
        ("no time", json.dumps({"target": 1, "registered": 1}), "at is missing"),
        ("a time in words", json.dumps(report(at="now")), 'at is "now", not a number'),
        ("NaN time", json.dumps(report(at=math.nan)), "at is NaN, not a finite number"),
        ("infinite time", json.dumps(report(at=math.inf)), "not a finite number"),
        ("time before 1970", json.dumps(report(at=-5)), "before 1970"),
        ("time beyond a float", '{"at": 1' + "0" * 400 + "}", "at is out of range"),
        ("target beyond a float", json.dumps(report(target=math.inf)), "not a whole number"),
        ("negative target", json.dumps(report(target=-1)), "target is -1, outside 0.."),
        ("huge registered count", json.dumps(report(registered=10**30)), "outside 0.."),
        ("a count as text", json.dumps(report(registered="2")), "not a whole number"),
        ("a count as a boolean", json.dumps(report(registered=True)), "not a whole number"),
        ("negative failures", json.dumps(report(failedTasks=-3)), "failedTasks is -3"),
        ("batch id below none", json.dumps(report(lastBatch=-2)), "lastBatch is -2"),
        ("NaN batch time", json.dumps(report(lastBatchAt=math.nan)), "lastBatchAt is NaN"),
        (
            "NaN capacity",
            json.dumps(report(capacity={**report()["capacity"], "recordsPerCoreSecond": math.nan})),
            "capacity.recordsPerCoreSecond is NaN",
        ),
        (
            "negative batch overhead",
            json.dumps(report(capacity={**report()["capacity"], "batchOverheadSeconds": -1})),
            "capacity.batchOverheadSeconds is -1",
        ),
        ("kafka not an object", json.dumps(report(kafka=[1])), "kafka is not an object"),
        (
            "negative offset",
            json.dumps(report(kafka=kafka(end={"orders": {"0": -5}}))),
            "kafka.end.orders.0 is -5",
        ),
        (
            "offset beyond Kafka's",
            json.dumps(report(kafka=kafka(committed={"orders": {"0": 2**63}}))),
            "kafka.committed.orders.0 is",
        ),
        (
            "infinite offset",
            json.dumps(report(kafka=kafka(end={"orders": {"0": math.inf}}))),
            "not a whole number",
        ),
        (
            "partition not a number",
            json.dumps(report(kafka=kafka(end={"orders": {"zero": 1}}))),
            '"zero" is not a partition number',
        ),
        (
            "offsets adding up beyond int64",
            json.dumps(report(kafka=kafka(end={"orders": {"0": 2**62, "1": 2**62}}))),
            "add up beyond",
        ),
        ("NaN poll time", json.dumps(report(kafka=kafka(at=math.nan))), "kafka.at is NaN"),
    ],
)
def test_a_report_with_impossible_figures_is_refused_never_raised(
    scenario: str, text: str, refusal: str
) -> None:
    # Before, some of these raised out of the parse (OverflowError, RecursionError) and failed
    # every reconcile; others were taken as figures (NaN, negative counts).
    assert parse_report(text) is None, scenario
    reading = read(text)
    assert reading.report is None, scenario
    assert refusal in reading.refused, (scenario, reading.refused)


@pytest.mark.parametrize(
    ("scenario", "times", "refusal", "judged"),
    [
        ("honest", {}, "", (NOW - 2, NOW - 3, NOW - 4)),
        ("a driver clock a little ahead", {"at": NOW + 20}, "", (NOW, NOW - 3, NOW - 4)),
        (
            "every time a little ahead",
            {"at": NOW + 20, "lastBatchAt": NOW + 20, "kafka.at": NOW + 20},
            "",
            (NOW, NOW, NOW),
        ),
        ("written far ahead", {"at": NOW + 86_400}, "at is 2027-01-16T08:00:00Z, more than", None),
        ("just beyond the skew", {"at": NOW + CLOCK_SKEW_SECONDS + 1}, "ahead of the", None),
        ("a batch far ahead", {"lastBatchAt": NOW + 3600}, "lastBatchAt is 2027-01-15", None),
        ("a Kafka poll far ahead", {"kafka.at": NOW + 3600}, "kafka.at is 2027-01-15", None),
        ("beyond the calendar", {"at": 1e300}, "at is 1e+300, more than", None),
        (
            "older than the driver",
            {"at": STARTED - 3600},
            "at is 2027-01-15T06:00:00Z, before the driver container started "
            "(2027-01-15T07:00:00Z)",
            None,
        ),
        # Only quieter, never livelier: taken as it is.
        (
            "a batch older than the driver",
            {"lastBatchAt": STARTED - 600},
            "",
            (NOW - 2, STARTED - 600, NOW - 4),
        ),
    ],
)
def test_report_times_are_judged_by_the_operators_clock(
    scenario: str,
    times: dict[str, float],
    refusal: str,
    judged: tuple[float, float, float] | None,
) -> None:
    body = report(**{k: v for k, v in times.items() if k != "kafka.at"})
    if "kafka.at" in times:
        body["kafka"] = kafka(at=times["kafka.at"])
    reading = read(json.dumps(body))
    assert refusal in reading.refused, (scenario, reading.refused)
    assert bool(reading.refused) == (judged is None), scenario
    if judged is not None:
        got = reading.report
        assert got is not None
        assert got.kafka is not None
        assert (got.at, got.last_batch_at, got.kafka.at) == judged, scenario


def rounds(writes: list[tuple[float, dict[str, Any]]], at: float, lag: int) -> tuple[str, str]:
    """The operator reads the annotation at each write's time (a pod event wakes it) and once
    more at ``at``: Ready's reason and message then."""
    seen: Sighting | None = None
    text = ""
    for when, body in writes:
        text = json.dumps(body)
        seen = read(text, now=when, seen=seen).sighting
    last = read(text, now=at, seen=seen)
    verdict = stream_progress(
        last.report,
        running_for=at - STARTED,
        lag_records=lag,
        trigger_seconds=5,
        now=at,
        refused=last.refused,
    )
    return verdict.reason, verdict.message


@pytest.mark.parametrize(
    ("scenario", "writes", "at", "lag", "reason"),
    [
        (
            "an honest driver, seen a moment ago",
            [(NOW, report())],
            NOW + 5,
            500,
            "Streaming",
        ),
        (
            "an honest driver that stopped writing (hung)",
            [(NOW, report())],
            NOW + REPORT_STALE_SECONDS + 5,
            500,
            "DriverNotReporting",
        ),
        (
            # Before, a report claiming a time in the future stayed fresh until that time came.
            "one report claiming a time ahead, never written again",
            [(NOW, report(at=NOW + 50, lastBatchAt=NOW + 50))],
            NOW + REPORT_STALE_SECONDS + 5,
            500,
            "DriverNotReporting",
        ),
        (
            "a copy of an old report written again and again",
            [
                (NOW + t, report(at=NOW + t + 50, lastBatchAt=NOW + t + 50))
                for t in range(0, 300, 10)
            ],
            NOW + 300,
            500,
            # The batch id never moved: no batch is newer than when the operator first saw it.
            "StreamStalled",
        ),
        (
            "a live driver whose batches move",
            [
                (NOW + t, report(at=NOW + t, lastBatch=t, lastBatchAt=NOW + t))
                for t in range(0, 300, 10)
            ],
            NOW + 300,
            500,
            "Streaming",
        ),
        (
            "a restarted query at the same batch id",
            [
                (NOW, report(runId="r1", lastBatch=7, lastBatchAt=NOW)),
                (NOW + 200, report(at=NOW + 200, runId="r2", lastBatch=7, lastBatchAt=NOW + 199)),
            ],
            NOW + 205,
            500,
            "Streaming",
        ),
    ],
)
def test_only_a_driver_that_keeps_writing_and_committing_looks_alive(
    scenario: str, writes: list[tuple[float, dict[str, Any]]], at: float, lag: int, reason: str
) -> None:
    assert rounds(writes, at, lag)[0] == reason, scenario


def test_a_refused_report_says_why_in_ready() -> None:
    reason, message = rounds([(NOW, report(at=NOW + 86_400))], NOW + 1, 500)
    assert reason == "DriverNotReporting"
    assert (
        "report on its pod was refused: at is 2027-01-16T08:00:00Z, more than 60s ahead of the "
        "operator's clock (are the nodes' clocks synchronized?)" in message
    )
    # The same annotation reads the same on every round: nothing new to write in the status.
    assert rounds([(NOW, report(at=NOW + 86_400))], NOW + 30, 500)[1] == message


def test_the_same_refused_text_is_one_sighting() -> None:
    # The operator logs a refusal once per text, not every round.
    text = json.dumps(report(at=math.nan))
    first = read(text)
    again = read(text, now=NOW + 10, seen=first.sighting)
    assert again.refused
    assert again.sighting is first.sighting


# Whatever an annotation holds: JSON with any numbers, or values near every bound.
NUMBERS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    st.sampled_from([0, -1, 2**31, 2**63 - 1, 2**63, NOW, NOW + 59, NOW + 61, 1e308, 5e-324]),
)
ANY_JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), NUMBERS, st.text(max_size=4)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)


def reports(*, times: Any, counts: Any, offsets: Any, rates: Any, seconds: Any, extra: Any) -> Any:
    """Report-shaped JSON from these value strategies; ``extra``: what else a field may hold."""
    partitions = st.dictionaries(
        st.sampled_from(["orders", "refunds"]),
        st.dictionaries(st.sampled_from(["0", "1", "2147483647"]), offsets, max_size=3),
        max_size=2,
    )
    capacity = st.fixed_dictionaries(
        {"recordsPerCoreSecond": rates, "batchOverheadSeconds": seconds, "batches": counts},
        optional={"fitted": st.booleans(), "executorStartSeconds": seconds},
    )
    kafka = st.fixed_dictionaries(
        {"at": times, "end": partitions, "committed": partitions},
        optional={"error": st.text(max_size=4)},
    )
    return st.fixed_dictionaries(
        {"at": times, "target": counts, "registered": counts},
        optional={
            "lastBatch": st.one_of(st.just(-1), counts),
            "lastBatchAt": times,
            "released": counts,
            "failedTasks": counts,
            "runId": st.one_of(st.text(max_size=3), extra),
            "capacity": st.one_of(capacity, extra),
            "kafka": st.one_of(kafka, extra),
        },
    )


# Sound reports with figures anywhere in their ranges (up to every bound), and wild ones.
REPORTS = st.one_of(
    reports(
        times=st.floats(STARTED - 60, NOW + 60),
        counts=st.one_of(st.integers(0, 2**31 - 1), st.sampled_from([0, 2**31 - 1])),
        offsets=st.one_of(st.integers(0, 2**61), st.sampled_from([0, 2**63 - 1])),
        rates=st.one_of(st.floats(0, 1e9), st.sampled_from([5e-324, 1e9])),
        seconds=st.one_of(st.floats(0, 86_400), st.sampled_from([0.0, 86_400.0])),
        extra=st.none(),
    ),
    reports(
        times=NUMBERS,
        counts=NUMBERS,
        offsets=NUMBERS,
        rates=NUMBERS,
        seconds=NUMBERS,
        extra=ANY_JSON,
    ),
)


def _fits_the_api(value: object) -> None:
    """Integers the API server stores (int64) and finite numbers only."""
    if isinstance(value, bool | str) or value is None:
        return
    if isinstance(value, int):
        assert -(2**63) <= value < 2**63, value
    elif isinstance(value, float):
        assert math.isfinite(value), value
    elif isinstance(value, dict):
        for item in value.values():
            _fits_the_api(item)
    else:
        assert isinstance(value, list), value
        for item in value:
            _fits_the_api(item)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(first=REPORTS, second=REPORTS, lag=st.one_of(st.none(), st.integers(0, 2**63 - 1)))
def test_no_report_fails_a_reconcile(
    first: dict[str, Any], second: dict[str, Any], lag: int | None
) -> None:
    # What a round does with the annotation, short of the API calls: read it, judge progress,
    # decide, and write the status the API server must take (a refused write fails the round).
    earlier = read(json.dumps(first), now=NOW - 10)
    reading = read(json.dumps(second), seen=earlier.sighting)
    for judged in (earlier, reading):
        stream_progress(
            judged.report,
            running_for=NOW - STARTED,
            lag_records=lag,
            trigger_seconds=5,
            now=NOW,
            refused=judged.refused,
        )
    got = reading.report
    event("refused" if got is None else "accepted")  # --hypothesis-show-statistics shows the mix
    if got is None:
        assert reading.refused
        return
    before = earlier.report.kafka if earlier.report is not None else None
    view = kafka_view(before, got.kafka) if got.kafka is not None else None
    decision = decide(
        Observation(
            now=NOW,
            partitions=None if view is None else view.partitions,
            capacity=got.capacity,
            driver_reachable=True,
            current_executors=got.registered,
            target_executors=got.target,
            consumption_rate=None if view is None else view.consumption_rate,
            cores_per_executor=2,
            trigger_interval_seconds=5,
            max_offsets_per_trigger=None,
        ),
        Limits(1, 10, 60, 30, 300),
        History(),
    )
    status = DeltaIngestionStatus(
        executors=ExecutorStatus(
            desired=decision.desired,
            current=got.registered,
            pending=max(0, got.target - got.registered),
        ),
        lag=lag_status(view, decision.lag_seconds, NOW),
        autoscaler=AutoscalerStatus(
            capacity=None
            if got.capacity is None
            else CapacityStatus(
                records_per_core_second=got.capacity.records_per_core_second,
                batch_overhead_seconds=got.capacity.batch_overhead_seconds,
                batches=got.capacity.batches,
                executor_start_seconds=got.capacity.executor_start_seconds,
            ),
            **history_status(decision.history),
        ),
    )
    document = status.model_dump(by_alias=True, mode="json", exclude_none=True)
    _fits_the_api(document)
    # A new leader reads it back.
    DeltaIngestionStatus.model_validate(json.loads(json.dumps(document, allow_nan=False)))
