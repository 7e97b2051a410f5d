"""metav1.Condition bookkeeping: a transition time changes only when the status does."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from deltaflow_api.reasons import ConditionType, Reason
from deltaflow_api.v1alpha1 import Condition


def set_condition(  # noqa: PLR0917 - mirrors the metav1.Condition fields
    conditions: list[Condition],
    type_: ConditionType,
    status: bool | None,
    reason: Reason,
    message: str,
    generation: int | None,
    now: datetime,
) -> list[Condition]:
    """``conditions`` with ``type_`` set; lastTransitionTime moves only when the status changes.

    ``None`` is the status Unknown (an input the decision needs could not be read)."""
    status_text = "Unknown" if status is None else "True" if status else "False"
    previous = next((c for c in conditions if c.type == type_), None)
    since = (
        previous.last_transition_time
        if previous is not None and previous.status == status_text
        else now
    )
    updated = Condition(
        type=str(type_),
        status=status_text,
        reason=str(reason),
        message=message,
        last_transition_time=since,
        observed_generation=generation,
    )
    return [c for c in conditions if c.type != type_] + [updated]


def condition(conditions: list[Condition], type_: ConditionType) -> Condition | None:
    """The condition of that type, if present."""
    return next((c for c in conditions if c.type == type_), None)


def settled_transitions(
    wanted: list[dict[str, Any]], stored: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """``wanted`` (conditions as written) with each one's lastTransitionTime as stored while its
    status is the stored one's. A round may set a condition twice (Ready from the driver pod,
    then overruled by the stream's progress): the second sees the first's status, not the
    stored one, and a stalled stream's Ready then moved its time every round (and was written
    every round for it, FL9)."""
    before = {c.get("type"): c for c in stored if isinstance(c, dict)}

    def since(condition: dict[str, Any]) -> Any:
        previous = before.get(condition.get("type")) or {}
        if previous.get("status") == condition.get("status") and previous.get("lastTransitionTime"):
            return previous["lastTransitionTime"]
        return condition.get("lastTransitionTime")

    return [{**c, "lastTransitionTime": since(c)} for c in wanted]
