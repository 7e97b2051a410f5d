"""Which operator serves a DeltaIngestion when more than one could.

Each chart release elects one leader among its own replicas (its Lease), but two releases that
watch the same namespaces would both reconcile every resource: two drivers' worth of decisions,
a RoleBinding each binds to its own driver ClusterRole, status flapping between them. So each
resource names the release that serves it in ``status.operator`` (the release's
``<namespace>/<Lease name>``, which survives a handover between its replicas) with the time it
last said so. The first operator to write that claim serves the resource; the write carries
the resourceVersion it read, so the API server lets exactly one of two racing operators win.
Any other stands back, says so once, and watches the claim: the owner renews it every
``renew_after`` seconds while it runs, and a claim that has not changed for ``expire_after``
seconds (as the watcher's own monotonic clock measures it, so clocks that disagree between
operators do not matter) is taken over. Removing a release hands its streams to another within
``expire_after``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

OwnershipAction = Literal["serve", "claim", "renew", "stand_back"]


@dataclass(frozen=True)
class Claim:
    """``status.operator`` as stored: who serves the resource and when it last renewed."""

    operator: str
    renewed_at: str  # as the owner wrote it (its clock; compared only for change by others)


@dataclass(frozen=True)
class Sighting:
    """Another operator's claim as this process first saw it unchanged, by its own clock."""

    claim: Claim
    since: float  # monotonic seconds


@dataclass(frozen=True)
class Ownership:
    """The decision: what to do, the claim as it stands (or will), and what to say."""

    action: OwnershipAction
    owner: str
    sighting: Sighting | None  # keep for the next round (None: no other operator's claim)
    message: str = ""


def read_claim(status: dict[str, Any] | None) -> Claim | None:
    """The claim in a stored status, or None when there is none a reader can trust."""
    raw = (status or {}).get("operator")
    if not isinstance(raw, dict):
        return None
    operator, renewed = raw.get("name"), raw.get("renewedAt")
    if not isinstance(operator, str) or not operator or not isinstance(renewed, str):
        return None
    return Claim(operator, renewed)


def decide_ownership(
    claim: Claim | None,
    *,
    me: str,
    now: datetime,
    monotonic: float,
    sighting: Sighting | None,
    renew_after: float,
    expire_after: float,
) -> Ownership:
    """Serve, claim, renew or stand back (see the module docstring).

    ``sighting``: what this process decided last round about another operator's claim on the
    same resource (None on a first look, or after a restart: it waits a full ``expire_after``)."""
    if claim is None:
        return Ownership("claim", me, None, "no operator served this resource yet")
    if claim.operator == me:
        renewed = _parse(claim.renewed_at)
        due = renewed is None or (now - renewed).total_seconds() >= renew_after
        return Ownership("renew" if due else "serve", me, None)
    if sighting is None or sighting.claim != claim:
        sighting = Sighting(claim, monotonic)  # a new claim, or a renewal: the owner is alive
    silent = monotonic - sighting.since
    if silent >= expire_after:
        return Ownership(
            "claim",
            me,
            None,
            f"took over from operator {claim.operator}, which has not renewed its claim for "
            f"{silent:.0f}s (it renews every {renew_after:.0f}s while it runs)",
        )
    return Ownership(
        "stand_back",
        claim.operator,
        sighting,
        f"operator {claim.operator} serves this DeltaIngestion (status.operator): {me} stands "
        f"back, and takes over only if that claim goes {expire_after:.0f}s without renewal",
    )


def claim_record(me: str, now: datetime) -> dict[str, str]:
    """``status.operator`` as this operator writes it."""
    return {"name": me, "renewedAt": now.isoformat(timespec="seconds").replace("+00:00", "Z")}


def renew_with_write(claim: Claim | None, me: str) -> bool:
    """Whether a status write made anyway should carry this operator's claim renewed: whenever
    the claim is its own. A flowing stream's figures (every ~2 min) and every stream's stamp
    refresh (decisions.status, every 240 s) then renew it before its 300 s are up, and the
    claim's own write is left to a status nothing else rewrites. Carrying it only once half
    its renewal was due (FL8) let an idle stream's 240 s refresh pass a 120 s-old claim by,
    which then came due on its own: 14 of the operator's requests a minute at 61 streams."""
    return claim is not None and claim.operator == me


def _parse(text: str) -> datetime | None:
    try:
        stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp if stamp.tzinfo is not None else None
