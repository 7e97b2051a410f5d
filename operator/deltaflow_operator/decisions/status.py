"""Whether a DeltaIngestion's status needs a write (pure).

Every round measures a stream's lag, freshness and cost anew, each figure stamped
``measuredAt``. Rewriting a status whose only change is those stamps is a heartbeat, which
Kubernetes steers clients away from (node heartbeats moved to Leases for that): at sixty streams
it was most of the operator's API requests (FL5, bench/README). So a status is written when
anything but a stamp changed, and otherwise once its oldest stamp is STAMP_REFRESH_SECONDS old:
a ``measuredAt`` is never older than that while the operator runs.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

STAMP = "measuredAt"
STAMP_REFRESH_SECONDS = 300.0


def _unstamped(value: Any) -> Any:
    """``value`` with each stamp's time left out (a stamp appearing or going still shows)."""
    if isinstance(value, dict):
        return {k: True if k == STAMP else _unstamped(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unstamped(v) for v in value]
    return value


def _stamps(value: Any) -> list[Any]:
    if isinstance(value, dict):
        found = [value[STAMP]] if STAMP in value else []
        return found + [s for k, v in value.items() if k != STAMP for s in _stamps(v)]
    if isinstance(value, list):
        return [s for v in value for s in _stamps(v)]
    return []


def status_write_due(
    wanted: dict[str, Any],
    stored: dict[str, Any],
    now: datetime,
    refresh_seconds: float = STAMP_REFRESH_SECONDS,
) -> bool:
    """Whether ``wanted`` (the status as this round computed it, without nulls) must be
    written over ``stored``: a change beyond the ``measuredAt`` stamps, or a stored stamp that
    is ``refresh_seconds`` old (or unreadable)."""
    if wanted == stored:
        return False
    if _unstamped(wanted) != _unstamped(stored):
        return True
    for stamp in _stamps(stored):
        try:
            at = datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
            if at.tzinfo is None or (now - at).total_seconds() >= refresh_seconds:
                return True
        except ValueError:
            return True
    return False
