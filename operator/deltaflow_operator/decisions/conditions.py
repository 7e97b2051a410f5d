"""metav1.Condition bookkeeping: a transition time changes only when the status does."""

from __future__ import annotations

from datetime import datetime

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
