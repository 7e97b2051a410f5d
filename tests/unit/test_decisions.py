"""Driver decisions: observed state in, plan out; checked without a cluster."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from deltaflow_api import DeltaIngestion
from deltaflow_operator.builders.common import SPEC_HASH_ANNOTATION
from deltaflow_operator.decisions.changes import changed_fields, needs_driver_replacement
from deltaflow_operator.decisions.conditions import set_condition, settled_transitions
from deltaflow_operator.decisions.driver import Observed, backoff_seconds, decide_driver
from deltaflow_operator.decisions.pod import Pod
from deltaflow_operator.decisions.status import status_write_due
from deltaflow_operator.settings import Settings
from support.manifests import valid_manifest

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
SETTINGS = Settings(backoff_base_seconds=10, backoff_max_seconds=300, degraded_after_failures=3)


def ingestion(status: dict[str, Any] | None = None, **spec: Any) -> DeltaIngestion:
    m = valid_manifest()
    m["metadata"].update(uid="u1", generation=2)
    m["spec"].update(spec)
    if status is not None:
        m["status"] = status
    return DeltaIngestion.model_validate(m)


def pod(phase: str = "Pending", spec_hash: str = "h1", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "orders-driver",
            "uid": "p1",
            "annotations": {SPEC_HASH_ANNOTATION: spec_hash},
        },
        "status": {"phase": phase, **status},
    }


def observe(ing: DeltaIngestion, driver: dict[str, Any] | None, **kw: Any) -> Observed:
    args: dict[str, Any] = {
        "desired_hash": "h1",
        "changed_fields": [],
        "now": NOW,
    }
    args.update(kw)
    return Observed(ingestion=ing, driver_pod=None if driver is None else Pod.of(driver), **args)


def conds(plan: Any) -> dict[str, tuple[str, str]]:
    return {c.type: (c.status, c.reason) for c in plan.conditions}


def test_no_driver_creates_one() -> None:
    plan = decide_driver(observe(ingestion(), None), SETTINGS)
    assert plan.action == "create"
    assert conds(plan)["Progressing"] == ("True", "DriverStarting")
    assert [e.reason for e in plan.events] == ["DriverCreated"]


def test_running_driver_with_current_spec_is_ready_and_left_alone() -> None:
    plan = decide_driver(observe(ingestion(), pod("Running")), SETTINGS)
    assert plan.action == "none"
    assert conds(plan)["Ready"] == ("True", "Streaming")
    assert conds(plan)["Degraded"] == ("False", "Healthy")


def test_changed_spec_replaces_the_driver_and_names_the_fields() -> None:
    plan = decide_driver(
        observe(ingestion(), pod("Running", "old"), changed_fields=["spec.executor.memory"]),
        SETTINGS,
    )
    assert plan.action == "delete"
    assert plan.delete_reason == "spec changed"
    assert "spec.executor.memory" in plan.events[0].message


def test_failed_driver_backs_off_exponentially_then_degrades() -> None:
    status: dict[str, Any] = {}
    delays = []
    for n in range(1, 4):
        plan = decide_driver(
            observe(
                ingestion(status=status),
                pod(
                    "Failed",
                    containerStatuses=[
                        {
                            "name": "driver",
                            "state": {
                                "terminated": {
                                    "exitCode": 3,
                                    "reason": "Error",
                                    "message": "broker unreachable",
                                }
                            },
                        }
                    ],
                ),
            ),
            SETTINGS,
        )
        assert plan.action == "delete"
        assert plan.driver.consecutive_failures == n
        assert plan.driver.next_start_after is not None
        delays.append((plan.driver.next_start_after - NOW).total_seconds())
        status = {
            "driver": plan.driver.model_dump(by_alias=True, mode="json"),
            "conditions": [c.model_dump(by_alias=True, mode="json") for c in plan.conditions],
        }
    assert delays == [10, 20, 40]
    assert conds(plan)["Degraded"] == ("True", "DriverCrashLooping")
    degraded = next(c for c in plan.conditions if c.type == "Degraded")
    assert "Error: broker unreachable" in degraded.message
    # While the backoff runs, nothing is created.
    waiting = decide_driver(observe(ingestion(status=status), None), SETTINGS)
    assert waiting.action == "wait"
    assert 39 <= (waiting.requeue_after or 0) <= 40
    later = decide_driver(
        observe(ingestion(status=status), None, now=NOW + timedelta(seconds=41)), SETTINGS
    )
    assert later.action == "create"
    assert later.events[0].reason == "DriverRestarted"


def test_backoff_is_capped() -> None:
    assert [backoff_seconds(n, SETTINGS) for n in (0, 1, 2, 3, 10)] == [0, 10, 20, 40, 300]


def test_a_driver_that_exits_cleanly_is_still_a_failure() -> None:
    plan = decide_driver(observe(ingestion(), pod("Succeeded")), SETTINGS)
    assert plan.action == "delete"
    assert "never ends" in (plan.driver.last_failure_reason or "")


def test_suspend_deletes_the_driver_and_reports_it() -> None:
    plan = decide_driver(observe(ingestion(suspend=True), pod("Running")), SETTINGS)
    assert plan.action == "delete"
    assert conds(plan)["Suspended"] == ("True", "Suspended")
    assert conds(plan)["Ready"] == ("False", "Suspended")
    idle = decide_driver(observe(ingestion(suspend=True), None), SETTINGS)
    assert idle.action == "none"


def test_pod_being_deleted_is_waited_for_never_doubled() -> None:
    terminating = pod("Running")
    terminating["metadata"]["deletionTimestamp"] = "2026-11-22T12:00:00Z"
    plan = decide_driver(observe(ingestion(), terminating, desired_hash="new"), SETTINGS)
    assert plan.action == "wait"


def test_transition_time_moves_only_on_status_change() -> None:
    first = set_condition([], "Ready", False, "A", "", 1, NOW)
    same = set_condition(first, "Ready", False, "B", "other reason", 2, NOW + timedelta(minutes=5))
    flipped = set_condition(same, "Ready", True, "C", "", 3, NOW + timedelta(minutes=9))
    assert same[0].last_transition_time == NOW
    assert same[0].reason == "B"
    assert flipped[0].last_transition_time == NOW + timedelta(minutes=9)


def test_a_written_condition_keeps_its_stored_transition_time_while_its_status_stands() -> None:
    stored = [
        {"type": "Ready", "status": "False", "reason": "StreamStalled", "lastTransitionTime": "t0"},
        {"type": "Degraded", "status": "False", "reason": "Healthy", "lastTransitionTime": "t0"},
    ]
    # This round set Ready True from the driver pod, then False from the stream's progress:
    # the second saw the first's True and stamped the time anew.
    wanted = [
        {"type": "Ready", "status": "False", "reason": "StreamStalled", "lastTransitionTime": "t9"},
        {"type": "Degraded", "status": "True", "reason": "Failed", "lastTransitionTime": "t9"},
        {"type": "Freshness", "status": "True", "reason": "OnTarget", "lastTransitionTime": "t9"},
    ]
    assert [c["lastTransitionTime"] for c in settled_transitions(wanted, stored)] == [
        "t0",  # the same status as stored: its time stands
        "t9",  # a new status: the time moves
        "t9",  # a new condition
    ]
    assert settled_transitions(wanted, stored)[0]["reason"] == "StreamStalled"


def test_change_classification() -> None:
    old = {"scaling": {"maxExecutors": 4}, "executor": {"memory": "2g"}, "suspend": False}
    assert changed_fields(old, {**old, "scaling": {"maxExecutors": 8}}) == [
        "spec.scaling.maxExecutors"
    ]
    assert not needs_driver_replacement(
        ["spec.scaling.maxExecutors", "spec.maintenance.vacuum.schedule", "spec.suspend"]
    )
    assert needs_driver_replacement(["spec.scaling.maxExecutors", "spec.executor.memory"])
    assert needs_driver_replacement(["spec.trigger.interval"])


def _waiting(reason: str, message: str) -> dict[str, Any]:
    return {
        "containerStatuses": [
            {
                "image": "deltaflow:nope",
                "state": {"waiting": {"reason": reason, "message": message}},
            }
        ]
    }


def _created(seconds_ago: float) -> dict[str, Any]:
    p = pod("Pending")
    p["metadata"]["creationTimestamp"] = (NOW - timedelta(seconds=seconds_ago)).isoformat()
    return p


def test_an_image_that_cannot_be_pulled_is_degraded_at_once_with_the_pull_error() -> None:
    driver = pod(
        "Pending", **_waiting("ImagePullBackOff", 'Back-off pulling image "deltaflow:nope"')
    )
    plan = decide_driver(observe(ingestion(), driver), SETTINGS)
    assert conds(plan)["Degraded"] == ("True", "ImagePullFailed")
    assert conds(plan)["Progressing"] == ("False", "ImagePullFailed")
    ready = next(c for c in plan.conditions if c.type == "Ready")
    assert "deltaflow:nope" in ready.message
    assert "spec.image" in ready.message


def _with_secrets() -> DeltaIngestion:
    auth = {
        "securityProtocol": "SASL_SSL",
        "saslMechanism": "PLAIN",
        "username": {"name": "kc", "key": "user"},
        "password": {"name": "kc", "key": "p"},
        "caCertificate": {"name": "kc2", "key": "ca.crt"},
    }
    m = valid_manifest()
    m["spec"]["source"]["auth"] = auth
    return DeltaIngestion.model_validate(m)


@pytest.mark.parametrize(
    ("kubelet_says", "fields"),
    [
        ('secret "kc" not found', ["spec.source.auth.password", "spec.source.auth.username"]),
        ("couldn't find key p in Secret data/kc", ["spec.source.auth.password"]),
        ('secret "kc2" not found', ["spec.source.auth.caCertificate"]),
        ("couldn't find key ca.crt in Secret data/kc2", ["spec.source.auth.caCertificate"]),
    ],
)
def test_a_missing_secret_the_kubelet_reports_is_named_by_the_spec_field(
    kubelet_says: str, fields: list[str]
) -> None:
    # The operator reads no Secret: the kubelet's refusal is the evidence, the spec names it.
    ing = _with_secrets()
    assert ing.namespace == "data"
    driver = pod("Pending", **_waiting("CreateContainerConfigError", kubelet_says))
    plan = decide_driver(observe(ing, driver), SETTINGS)
    assert plan.action == "none"
    assert conds(plan)["Degraded"] == ("True", "SecretMissing")
    assert conds(plan)["Ready"] == ("False", "SecretMissing")
    message = next(c for c in plan.conditions if c.type == "Degraded").message
    named = sorted(f for f in _secret_fields() if f"{f} (" in message)
    assert named == sorted(fields)
    assert kubelet_says in message


def _secret_fields() -> list[str]:
    return [f"spec.source.auth.{f}" for f in ("username", "password", "caCertificate")]


def test_a_config_error_about_another_secret_is_reported_in_the_kubelets_words() -> None:
    driver = pod(
        "Pending", **_waiting("CreateContainerConfigError", 'secret "kafka-creds" not found')
    )
    plan = decide_driver(observe(_with_secrets(), driver), SETTINGS)
    assert conds(plan)["Degraded"] == ("True", "ContainerConfigError")
    degraded = next(c for c in plan.conditions if c.type == "Degraded")
    assert 'secret "kafka-creds" not found' in degraded.message


def test_unschedulable_waits_for_the_deadline_then_degrades_with_the_schedulers_reason() -> None:
    unschedulable = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/1 nodes are available: 1 Insufficient cpu.",
    }
    early = _created(30)
    early["status"]["conditions"] = [unschedulable]
    plan = decide_driver(observe(ingestion(), early), SETTINGS)
    assert conds(plan)["Progressing"] == ("True", "Unschedulable")
    assert conds(plan)["Degraded"][0] == "False"
    late = _created(SETTINGS.driver_pending_deadline_seconds + 1)
    late["status"]["conditions"] = [unschedulable]
    plan = decide_driver(observe(ingestion(), late), SETTINGS)
    assert conds(plan)["Degraded"] == ("True", "Unschedulable")
    degraded = next(c for c in plan.conditions if c.type == "Degraded")
    assert "Insufficient cpu" in degraded.message


def test_a_driver_stuck_terminating_past_the_deadline_is_degraded_with_what_to_do() -> None:
    stuck = pod("Running")
    stuck["metadata"]["namespace"] = "data"
    stuck["metadata"]["deletionTimestamp"] = (NOW - timedelta(seconds=30)).isoformat()
    plan = decide_driver(observe(ingestion(), stuck), SETTINGS)
    assert conds(plan)["Ready"] == ("False", "DriverStopping")
    stuck["metadata"]["deletionTimestamp"] = (
        NOW - timedelta(seconds=SETTINGS.driver_pending_deadline_seconds + 1)
    ).isoformat()
    plan = decide_driver(observe(ingestion(), stuck), SETTINGS)
    assert conds(plan)["Degraded"] == ("True", "DriverStuckTerminating")
    assert plan.action == "wait"  # never a second driver next to one that may still run
    degraded = next(c for c in plan.conditions if c.type == "Degraded")
    assert "--force" in degraded.message


def _failed_with(reason: str, message: str, spec_hash: str = "h1") -> dict[str, Any]:
    terminated = {
        "reason": "Error",
        "exitCode": 3,
        "message": json.dumps({"reason": reason, "message": message}),
    }
    failed = pod("Failed", spec_hash, containerStatuses=[{"state": {"terminated": terminated}}])
    failed["metadata"]["namespace"] = "data"
    return failed


def test_a_failure_no_restart_can_fix_keeps_the_pod_and_says_what_to_do() -> None:
    failed = _failed_with("TableBehind", "the table is behind its checkpoint.")
    plan = decide_driver(observe(ingestion(), failed), SETTINGS)
    assert plan.action == "none"  # no restart, the failed pod (and its logs) stays
    assert conds(plan)["Degraded"] == ("True", "TableBehind")
    assert conds(plan)["Progressing"] == ("False", "NeedsAction")
    ready = next(c for c in plan.conditions if c.type == "Ready")
    assert "kubectl delete pod orders-driver -n data" in ready.message
    assert [e.reason for e in plan.events] == ["TableBehind"]
    # The next round says nothing new: one Event per failure, not one per poll.
    again = ingestion(
        status={
            "driver": plan.driver.model_dump(by_alias=True, mode="json", exclude_none=True),
            "conditions": [
                c.model_dump(by_alias=True, mode="json", exclude_none=True) for c in plan.conditions
            ],
        }
    )
    assert decide_driver(observe(again, failed), SETTINGS).events == []


def test_a_spec_change_replaces_a_driver_that_needed_action() -> None:
    failed = _failed_with("InvalidSpec", "spec.format.schema: no such type", spec_hash="old")
    plan = decide_driver(
        observe(ingestion(), failed, changed_fields=["spec.format.schema"]), SETTINGS
    )
    assert plan.action == "delete"
    assert plan.delete_reason == "spec changed"


def test_a_failure_a_restart_may_fix_restarts_with_backoff_and_names_the_reason() -> None:
    failed = _failed_with("ObjectStoreUnreachable", "the endpoint does not answer")
    plan = decide_driver(observe(ingestion(), failed), SETTINGS)
    assert plan.action == "delete"
    assert plan.driver.last_failure_reason == (
        "ObjectStoreUnreachable: the endpoint does not answer"
    )


def _every_situation() -> list[tuple[str, Observed]]:
    deleting = pod("Running")
    deleting["metadata"].update(
        namespace="data", deletionTimestamp=(NOW - timedelta(seconds=5)).isoformat()
    )
    return [
        ("no driver", observe(ingestion(), None)),
        ("running", observe(ingestion(), pod("Running"))),
        ("pending", observe(ingestion(), pod("Pending"))),
        ("failed", observe(ingestion(), pod("Failed"))),
        ("needs action", observe(ingestion(), _failed_with("TableLost", "gone"))),
        ("suspended", observe(ingestion(suspend=True), pod("Running"))),
        ("spec changed", observe(ingestion(), pod("Running", "old"))),
        ("stopping", observe(ingestion(), deleting)),
        (
            "secret missing",
            observe(
                _with_secrets(),
                pod("Pending", **_waiting("CreateContainerConfigError", 'secret "kc" not found')),
            ),
        ),
        (
            "image pull",
            observe(ingestion(), pod("Pending", **_waiting("ErrImagePull", "no registry"))),
        ),
    ]


@pytest.mark.parametrize(("situation", "observed"), _every_situation())
def test_every_plan_sets_every_driver_condition(situation: str, observed: Observed) -> None:
    # Starting from no conditions at all: a plan must not rely on an earlier round's.
    plan = decide_driver(observed, SETTINGS)
    assert set(conds(plan)) >= {"Ready", "Progressing", "Degraded", "Suspended"}, situation
    for c in plan.conditions:
        assert c.reason, (situation, c.type)
        assert c.status in ("True", "False", "Unknown")


def _condition(type_: str, status: str, reason: str, message: str = "") -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": message}


STEADY = [_condition("Freshness", "True", "OnTarget", "p99 40 s"),
          _condition("Scaling", "False", "Hold")]  # fmt: skip


def _stamped(
    minutes_ago: float, records: int = 0, conditions: list[Any] | None = None, **more: Any
) -> dict[str, Any]:
    at = (NOW - timedelta(minutes=minutes_ago)).isoformat().replace("+00:00", "Z")
    return {
        "freshness": {"measuredAt": at, "records": records, "p99Seconds": 40},
        "lag": {"measuredAt": at, "records": 0, "worstPartitions": []},
        "observedGeneration": 2,
        "conditions": STEADY if conditions is None else conditions,
        **more,
    }


def _said(message: str, *others: dict[str, Any]) -> list[dict[str, Any]]:
    """Steady conditions, Freshness saying ``message``."""
    return [_condition("Freshness", "True", "OnTarget", message), *STEADY[1:], *others]


def _autoscaler(verdict: str = "Hold", **figures: Any) -> dict[str, Any]:
    """A dedicated stream's autoscaler section: each round renews its figures."""
    return {
        "mode": "lag",
        "verdict": verdict,
        "reason": "holding 0 executors: lag 88k records ≈ 18 s",
        "capacity": {"recordsPerCoreSecond": 24000.0, "batches": 7},
        "recommendations": [{"at": 100.0, "executors": 0, "arrivalRate": 5000.0}],
        **figures,
    }


def _holding(message: str = "holding 0 executors: lag 88k records ≈ 18 s") -> list[Any]:
    return [STEADY[0], _condition("Scaling", "False", "Hold", message)]


BEHIND = [_condition("Freshness", "False", "BehindTarget"), STEADY[1]]
IDLE = [_condition("Freshness", "Unknown", "NoRecentRecords"), STEADY[1]]
UNMEASURED = [_condition("Freshness", "Unknown", "NotMeasured"), STEADY[1]]
CONVERGING = [STEADY[0], _condition("Scaling", "True", "ScaleUp")]
MEMBER_FAILED = _condition("Degraded", "True", "MemberFailed", "failed 2 time(s): boom")


@pytest.mark.parametrize(
    ("wanted", "stored", "written_ago", "due"),
    [
        (_stamped(0), _stamped(0), 60.0, False),  # the same, stamps and all
        (_stamped(0), _stamped(1), 60.0, False),  # only the stamps moved: a heartbeat
        (_stamped(0), _stamped(3.9), 60.0, False),
        (_stamped(0), _stamped(4), 60.0, True),  # ... written once the stored ones are 4 min old
        # A steady stream's figures moved: written once the last write is 110 s old (its age,
        # not the stamps': a figure measured a minute before the write is no reason to write).
        (_stamped(0, records=600), _stamped(1), 60.0, False),
        (_stamped(0, records=600), _stamped(3), 100.0, False),
        (_stamped(0, records=600), _stamped(1), 110.0, True),
        (_stamped(0, records=600), _stamped(1), None, True),  # not written since this start
        (_stamped(0, conditions=_said("p99 41 s")), _stamped(1), 60.0, False),  # its message
        (_stamped(0, conditions=_said("p99 41 s")), _stamped(1), 120.0, True),
        ({"conditions": _said("p99 41 s")}, {"conditions": _said("p99 40 s")}, 60.0, False),
        ({"conditions": _said("p99 41 s")}, {"conditions": _said("p99 40 s")}, 120.0, True),
        # A dedicated driver's autoscaler: its reason, capacity, recommendations and the Scaling
        # message quote this round's lag and rates (FL9: one such stream wrote every 4 s).
        (
            _stamped(
                0,
                autoscaler=_autoscaler(
                    reason="holding 0 executors: lag 90k records ≈ 18 s",
                    capacity={"recordsPerCoreSecond": 25000.0, "batches": 8},
                    recommendations=[
                        {"at": 100.0, "executors": 0, "arrivalRate": 5000.0},
                        {"at": 104.0, "executors": 0, "arrivalRate": 4990.0},
                    ],
                ),
                conditions=_holding("holding 0 executors: lag 90k records ≈ 18 s"),
            ),
            _stamped(1, autoscaler=_autoscaler(), conditions=_holding()),
            60.0,
            False,
        ),
        (
            _stamped(0, autoscaler=_autoscaler(reason="other")),
            _stamped(1, autoscaler=_autoscaler()),
            110.0,
            True,
        ),
        # ... but its verdict, or a memory appearing, is written at once.
        (
            _stamped(0, autoscaler=_autoscaler("ScaleDown")),
            _stamped(1, autoscaler=_autoscaler()),
            5.0,
            True,
        ),
        (
            _stamped(0, autoscaler=_autoscaler()),
            _stamped(1, autoscaler=_autoscaler(recommendations=[])),
            5.0,
            True,
        ),
        (
            _stamped(0, autoscaler=_autoscaler(lastAction={"at": 104.0})),
            _stamped(1, autoscaler=_autoscaler()),
            5.0,
            True,
        ),
        # An idle topic's stream is behind on nothing: steady.
        (
            _stamped(0, records=600, conditions=IDLE),
            _stamped(1, conditions=IDLE),
            60.0,
            False,
        ),
        # Not steady: its figures are what its reader watches.
        (_stamped(0, 600, BEHIND), _stamped(1, 0, BEHIND), 60.0, True),
        (_stamped(0, 600, CONVERGING), _stamped(1, 0, CONVERGING), 60.0, True),
        (_stamped(0, 600, UNMEASURED), _stamped(1, 0, UNMEASURED), 60.0, True),
        # Anything else: at once.
        (_stamped(0, conditions=BEHIND), _stamped(1), 5.0, True),  # a condition's status
        (  # another condition's message (a new failure under the same reason)
            _stamped(0, conditions=_said("p99 40 s", {**MEMBER_FAILED, "message": "other"})),
            _stamped(1, conditions=_said("p99 40 s", MEMBER_FAILED)),
            5.0,
            True,
        ),
        (  # a figure became known (a driver's first report)
            {**_stamped(0), "cost": {"measuredAt": "x", "cpuSecondsPerHour": 1.0}},
            {**_stamped(1), "cost": {"measuredAt": "x"}},
            5.0,
            True,
        ),
        (_stamped(0, observedGeneration=3), _stamped(1), 5.0, True),
        (_stamped(0, placement={"mode": "pooled"}), _stamped(1), 5.0, True),  # a field appeared
        (_stamped(0), {**_stamped(1), "cost": {"cores": 0.1}}, 5.0, True),  # ... or went
        ({**_stamped(0), "lag": {"records": 0, "worstPartitions": []}}, _stamped(1), 5.0, True),
        (
            _stamped(0),
            {**_stamped(1), "lag": {**_stamped(1)["lag"], "measuredAt": "yesterday"}},
            5.0,
            True,
        ),
        (
            _stamped(0),
            {**_stamped(1), "lag": {**_stamped(1)["lag"], "measuredAt": "2026-11-22T11:59:00"}},
            5.0,
            True,
        ),
        (_stamped(0), {}, None, True),  # nothing stored yet
    ],
)
def test_a_status_is_written_at_once_when_more_than_its_figures_changed_else_at_a_pace(
    wanted: dict[str, Any], stored: dict[str, Any], written_ago: float | None, due: bool
) -> None:
    assert status_write_due(wanted, stored, NOW, written_ago) is due


def test_a_kafka_preflight_failure_names_itself_on_ready_until_the_next_driver() -> None:
    field = "spec.source.auth.password (Secret kafka-creds, key password)"
    failed = _failed_with("KafkaAuthenticationFailed", f"{field}: the broker refused the login")
    plan = decide_driver(observe(ingestion(), failed), SETTINGS)
    assert plan.action == "delete"  # restarted with backoff: fixing the Secret is enough
    assert conds(plan)["Ready"] == ("False", "KafkaAuthenticationFailed")
    status = {
        "driver": plan.driver.model_dump(by_alias=True, mode="json"),
        "conditions": [c.model_dump(by_alias=True, mode="json") for c in plan.conditions],
    }
    # The pod is gone and the backoff runs: Ready still says what to fix, and when.
    waiting = decide_driver(observe(ingestion(status=status), None), SETTINGS)
    assert waiting.action == "wait"
    assert conds(waiting)["Ready"] == ("False", "KafkaAuthenticationFailed")
    assert conds(waiting)["Progressing"] == ("True", "BackoffWaiting")
    ready = next(c for c in waiting.conditions if c.type == "Ready")
    assert field in ready.message
    assert "restarting the driver at" in ready.message
    later = decide_driver(
        observe(ingestion(status=status), None, now=NOW + timedelta(seconds=11)), SETTINGS
    )
    assert later.action == "create"
    assert conds(later)["Ready"] == ("False", "DriverStarting")
