"""One vocabulary for condition types, condition reasons and Event reasons: the enums, the README's
conditions table, the autoscaler's verdicts and the runtime's failures agree."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, get_args

from deltaflow_api.failures import KAFKA_FAILURES, FailureReason, restart_helps
from deltaflow_api.reasons import ConditionType, EventReason, Reason
from deltaflow_api.v1alpha1 import DeltaIngestionStatus
from deltaflow_operator.autoscaler.explain import LIMIT_VERDICTS
from deltaflow_operator.autoscaler.policy import Verdict
from deltaflow_operator.decisions.conditions import condition, set_condition
from deltaflow_operator.kube import Kube

README = Path(__file__).resolve().parents[2] / "README.md"
NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)

# A verdict the Scaling condition never shows: it names the missing input instead.
NEVER_SHOWN = {Reason.UNKNOWN}
NEEDS_ACTION = {f for f in FailureReason if not restart_helps(f)}


def _conditions_table() -> list[str]:
    """The first column of each row of the README's conditions table."""
    lines = README.read_text().splitlines()
    start = lines.index("| reason | when | what happens |")
    cells = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells.append(line.split("|")[1])
    return cells


def test_the_readme_conditions_table_names_every_reason_and_nothing_else() -> None:
    cells = _conditions_table()
    assert len(cells) >= 10
    named = {name for cell in cells for name in re.findall(r"`([^`]+)`", cell)}
    values = {r.value for r in Reason}
    assert named - values == set(), "the README names reasons the operator does not set"
    assert values - {r.value for r in NEVER_SHOWN} - named == set(), "undocumented reasons"


def test_every_autoscaler_verdict_is_a_condition_reason() -> None:
    # The policy may not import the API (an import contract): autoscaler/explain.py maps with
    # Reason(verdict).
    verdicts = get_args(Verdict)
    assert len(verdicts) >= 10
    for verdict in verdicts:
        assert Reason(verdict).value == verdict


def test_every_limit_verdict_has_its_warning_event_reason() -> None:
    for verdict in LIMIT_VERDICTS:
        assert verdict in get_args(Verdict)
        assert EventReason(f"Scaling{verdict}").value == f"Scaling{verdict}"
    scaling_events = {e for e in EventReason if e.startswith("Scaling")}
    assert scaling_events == {EventReason(f"Scaling{v}") for v in LIMIT_VERDICTS}


def test_a_failure_no_restart_fixes_keeps_its_name_on_conditions_and_events() -> None:
    # The NeedsAction path sets Reason(failure) and posts EventReason(failure).
    assert len(NEEDS_ACTION) >= 10
    for failure in NEEDS_ACTION:
        assert Reason(failure.value).value == failure.value
        assert EventReason(failure.value).value == failure.value
    # And no other failure a restart may fix is a reason: those say DriverFailed, but for the
    # Kafka preflight's, which Ready names (the message says what to fix).
    failures = {f.value for f in FailureReason}
    borrowed = {r.value for r in EventReason if r.value in failures}
    assert borrowed == {f.value for f in NEEDS_ACTION}
    borrowed = {r.value for r in Reason if r.value in failures}
    assert borrowed == {f.value for f in NEEDS_ACTION | KAFKA_FAILURES}
    assert not KAFKA_FAILURES & NEEDS_ACTION


def test_the_vocabularies_serialize_as_their_plain_strings() -> None:
    conditions = set_condition(
        [], ConditionType.READY, True, Reason.STREAMING, "the driver is running", 2, NOW
    )
    found = condition(conditions, ConditionType.READY)
    assert found is not None
    assert type(found.type) is str
    assert type(found.reason) is str
    status = DeltaIngestionStatus(conditions=conditions)
    document = status.model_dump(by_alias=True, mode="json", exclude_none=True)
    (ready,) = document["conditions"]
    assert (ready["type"], ready["reason"]) == ("Ready", "Streaming")
    assert '"reason": "Streaming"' in json.dumps(document)
    # A stored condition with a reason of another operator version still parses.
    stored = DeltaIngestionStatus.model_validate(
        {"conditions": [{**ready, "reason": "SomethingOlder"}]}
    )
    assert stored.conditions[0].reason == "SomethingOlder"
    for member in (*ConditionType, *Reason, *EventReason):
        assert str(member) == f"{member}" == member.value


def test_an_event_goes_to_the_api_server_with_its_plain_reason() -> None:
    kube = Kube()
    posted: list[Any] = []

    class Core:
        def create_namespaced_event(self, namespace: str, event: Any) -> None:
            posted.append(event)

    kube.core = Core()  # type: ignore[assignment]
    body = {"metadata": {"name": "orders", "namespace": "data", "uid": "u1"}}
    kube.post_event(body, "Warning", EventReason.SCALING_HOT_PARTITION, "one partition")
    (event,) = posted
    assert type(event.reason) is str
    wire = kube.api_client.sanitize_for_serialization(event)
    assert json.loads(json.dumps(wire))["reason"] == "ScalingHotPartition"
