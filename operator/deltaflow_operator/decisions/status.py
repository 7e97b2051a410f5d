"""Whether a DeltaIngestion's status needs a write (pure).

Every round measures a stream's lag, freshness and cost anew: each of those sections carries a
``measuredAt`` stamp. Writing the status on every new figure is a metrics stream through the API
server (Prometheus carries the figures as they move); writing it on every new stamp is a
heartbeat, which Kubernetes steers clients away from (node heartbeats moved to Leases for that,
and a node's status is rewritten every 5 min when nothing changed). At sixty streams those
writes were most of the operator's API requests (FL5, FL6 in bench/README). So a status is
written:

- at once when anything but the measured figures changed (a condition's status or reason, a
  message other than the three below, the placement, the autoscaler's verdict and last action,
  the observed generation), or a figure appeared or went (unknown to known);
- when only figures changed (with the Freshness, Ready and Scaling messages, which quote the
  window's ages, the last batch and the lag, and the autoscaler's reason, measured capacity and
  recent recommendations, which every round of a dedicated driver renews: FL9 found one such
  stream writing every 4 s): at once while the stream is not steady (its freshness target not
  held, or its executors converging: those figures are what its reader watches; an idle topic's
  stream is steady, and wrote its cost every 10 s round before), and once the
  last write is FIGURES_REFRESH_SECONDS old while it is (the write's age, not the stamps': a
  stamp is when a figure was measured, often a report's age before the write; FL7 found the
  stamps' age let a steady stream write every round);
- when only the stamps changed: once they are STAMP_REFRESH_SECONDS old, so a ``measuredAt``
  is never older than that while the operator runs.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from deltaflow_api.reasons import ConditionType, Reason

STAMP = "measuredAt"
# Under the ownership claim's 300 s renewal, so the refresh carries the claim (ownership.
# renew_with_write) and the claim needs no write of its own.
STAMP_REFRESH_SECONDS = 240.0
# Just under two reconcile intervals (60 s): a steady stream's figures are written every other
# round, not every round.
FIGURES_REFRESH_SECONDS = 110.0
# Conditions whose message quotes figures (the window's p99 age, the last batch committed, the
# lag the autoscaler held on).
FIGURE_MESSAGES = frozenset(
    {ConditionType.FRESHNESS.value, ConditionType.READY.value, ConditionType.SCALING.value}
)
# Figures without a stamp of their own, per top-level section. The autoscaler keeps its recent
# recommendations in memory as well (autoscaler.engine), so a paced write loses none of them
# while this process serves the stream; a new leader starts from the status, up to
# FIGURES_REFRESH_SECONDS behind (a peak in that gap no longer holds a scale-down back).
UNSTAMPED_FIGURES = {"autoscaler": frozenset({"reason", "capacity", "recommendations"})}


def _is_condition(value: dict[str, Any]) -> bool:
    return {"type", "status", "reason"} <= value.keys()


def _unstamped(value: Any) -> Any:
    """``value`` with each stamp's time left out (a stamp appearing or going still shows)."""
    if isinstance(value, dict):
        return {k: True if k == STAMP else _unstamped(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unstamped(v) for v in value]
    return value


def _essentials(status: dict[str, Any]) -> Any:
    """The status without its figures (keeping which are known): what is written at once."""
    return _unmeasured(
        {
            section: {
                k: bool(v) if k in UNSTAMPED_FIGURES[section] else v for k, v in value.items()
            }
            if section in UNSTAMPED_FIGURES and isinstance(value, dict)
            else value
            for section, value in status.items()
        }
    )


def _unmeasured(value: Any) -> Any:
    """``value`` with each measured section's figures and the figure-quoting conditions'
    messages left out, keeping which figures are known."""
    if isinstance(value, dict):
        if STAMP in value:
            return sorted(value)
        if _is_condition(value) and value["type"] in FIGURE_MESSAGES:
            return {k: v for k, v in value.items() if k != "message"}
        return {k: _unmeasured(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unmeasured(v) for v in value]
    return value


def _stamps(value: Any) -> list[Any]:
    if isinstance(value, dict):
        found = [value[STAMP]] if STAMP in value else []
        return found + [s for k, v in value.items() if k != STAMP for s in _stamps(v)]
    if isinstance(value, list):
        return [s for v in value for s in _stamps(v)]
    return []


def _stamps_older_than(stored: dict[str, Any], now: datetime, seconds: float) -> bool:
    """Whether a stored stamp is ``seconds`` old (or unreadable)."""
    for stamp in _stamps(stored):
        try:
            at = datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
            if at.tzinfo is None or (now - at).total_seconds() >= seconds:
                return True
        except ValueError:
            return True
    return False


def _steady(status: dict[str, Any]) -> bool:
    """Freshness holds its target, or nothing arrived to measure it on (an idle topic's stream
    is behind on nothing), and the executors are not converging."""
    said = {
        c.get("type"): (c.get("status"), c.get("reason"))
        for c in status.get("conditions") or []
        if isinstance(c, dict)
    }
    freshness = said.get(ConditionType.FRESHNESS, (None, None))
    idle = freshness == ("Unknown", Reason.NO_RECENT_RECORDS)
    converging = said.get(ConditionType.SCALING, (None, None))[0] == "True"
    return (freshness[0] == "True" or idle) and not converging


def status_write_due(
    wanted: dict[str, Any],
    stored: dict[str, Any],
    now: datetime,
    written_ago: float | None,
    *,
    refresh_seconds: float = STAMP_REFRESH_SECONDS,
    figures_seconds: float = FIGURES_REFRESH_SECONDS,
) -> bool:
    """Whether ``wanted`` (the status as this round computed it, without nulls) must be
    written over ``stored`` (see the module docstring); ``written_ago``: seconds since this
    operator last wrote it (None: not since it started)."""
    if wanted == stored:
        return False
    if _essentials(wanted) != _essentials(stored):
        return True
    if _unstamped(wanted) != _unstamped(stored):
        return not _steady(wanted) or written_ago is None or written_ago >= figures_seconds
    return _stamps_older_than(stored, now, refresh_seconds)
