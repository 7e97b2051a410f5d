"""Where a stream's Spark runs: in the driver pod alone (``local``) or on executor pods.

A spec that allows a count of 0 (``scaling.minExecutors: 0``, or ``executors: 0`` in manual
mode) runs Spark in local mode inside the driver pod while the count is 0: one JVM, no executor
pods, no block-manager traffic. In lag mode the count is the autoscaler's (the policy rates a
count of 0 by the driver's own task slots), so its stabilization windows are the hysteresis: a
stream leaves local mode only once the scale-up window agreed that the driver alone falls short
of the lag target, and returns only once the scale-down window saw nothing more needed.

A move is a new driver from the same checkpoint: the mode is part of the driver's spec hash, so
the operator replaces the driver as for any spec change, the old one gone before the new one
starts (never two writers). Pure: the spec, the last placement and this round's count in, the
placement out.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from deltaflow_api.v1alpha1 import DeltaIngestionSpec, PlacementStatus

Mode = Literal["local", "executors"]

# Reasons, as status.placement.reason and in the move's Event.
EXECUTORS_REQUIRED = "ExecutorsRequired"  # the spec asks for at least one executor
STARTED_LOCAL = "StartedLocal"  # minExecutors 0: a new stream starts in the driver alone
DRIVER_KEEPS_UP = "DriverKeepsUp"  # the count went to 0
NEEDS_EXECUTORS = "NeedsExecutors"  # the count went above 0
MANUAL = "Manual"  # scaling.mode manual: the spec's count decides
LOCAL_DRIVER_FAILED = "LocalDriverFailed"  # it kept failing in local mode (its heap, say)
LEFT_POOL = "LeftPool"  # it left its pool for a driver of its own
AUTO_PLACEMENT = "AutoPlacement"  # spec.placement auto decided where it runs (the message: why)
MOVED_BETWEEN_POOLS = "MovedBetweenPools"  # the pool keeper packed it into another pool

# A local-mode driver that failed this many times in a row moves to executor pods (the failure
# may be the driver's heap holding the executors' work: an OOM kill), and stays there this long
# before the autoscaler's count may bring it back.
LOCAL_FAILURES_BEFORE_MOVE = 2
LOCAL_FAILURE_HOLD_SECONDS = 3600.0
_AUTOSCALED = {STARTED_LOCAL, DRIVER_KEEPS_UP, NEEDS_EXECUTORS}
# Why it runs on a driver of its own at all: kept while the mode holds, not replaced by the
# count's words (a move between local mode and executors says its own).
_STICKY = _AUTOSCALED | {LEFT_POOL}


def _spec_count(spec: DeltaIngestionSpec) -> int:
    scaling = spec.scaling
    if scaling.mode == "manual" and scaling.executors is not None:
        return scaling.executors
    return scaling.min_executors


def driver_mode(spec: DeltaIngestionSpec, placement: PlacementStatus | None) -> Mode:
    """The mode a driver started now runs in: the last placement, if the spec still allows it."""
    if not spec.scaling.may_run_locally:
        return "executors"
    if spec.scaling.mode == "manual":
        return "local" if _spec_count(spec) == 0 else "executors"
    if placement is None or placement.mode == "pooled":  # a stream leaving a pool starts small
        return "local"
    return placement.mode


def place(
    spec: DeltaIngestionSpec,
    previous: PlacementStatus | None,
    desired: int | None,
    why: str,
    now: datetime,
    *,
    driver_failures: int = 0,
) -> PlacementStatus:
    """This round's placement: ``previous`` as it was while the mode holds (unchanged, so the
    status is not rewritten), a new one with the reason when it moves.

    ``desired``: the autoscaler's count this round (None: it could not decide, e.g. the driver
    does not report during a move); ``why``: the autoscaler's words for it;
    ``driver_failures``: the driver's failures in a row (status.driver.consecutiveFailures)."""
    stored = previous
    if previous is not None and previous.mode == "pooled":
        previous = None  # its driver of its own starts as a new stream's would
    held = (
        previous is not None
        and previous.reason == LOCAL_DRIVER_FAILED
        and previous.since is not None
        and (now - previous.since).total_seconds() < LOCAL_FAILURE_HOLD_SECONDS
    )
    if not spec.scaling.may_run_locally:
        mode: Mode = "executors"
        reason = EXECUTORS_REQUIRED
        message = (
            f"spec.scaling asks for at least {max(1, _spec_count(spec))} executor(s): Spark runs "
            "on executor pods (minExecutors 0 lets a small stream run in the driver pod alone)"
        )
    elif spec.scaling.mode == "manual":
        mode = driver_mode(spec, previous)
        reason = MANUAL
        message = (
            "spec.scaling.executors is 0: Spark runs in local mode in the driver pod"
            if mode == "local"
            else f"spec.scaling.executors is {_spec_count(spec)}: Spark runs on executor pods"
        )
    elif (
        previous is not None
        and previous.mode == "local"
        and driver_failures >= LOCAL_FAILURES_BEFORE_MOVE
    ):
        mode, reason = "executors", LOCAL_DRIVER_FAILED
        message = (
            f"the driver failed {driver_failures} times in a row in local mode (see "
            "status.driver.lastFailureReason; an out-of-memory kill means its heap cannot hold "
            "the work): Spark moves to executor pods for at least "
            f"{LOCAL_FAILURE_HOLD_SECONDS / 60:.0f} min"
        )
    elif held and previous is not None:
        return previous
    elif desired is None or previous is None:
        mode = driver_mode(spec, previous)
        if previous is not None and previous.mode == mode and previous.reason in _AUTOSCALED:
            return previous
        if mode == "local":
            reason = STARTED_LOCAL
            message = (
                "minExecutors is 0: Spark runs in local mode in the driver pod until the driver "
                "alone cannot keep the lag target"
            )
        else:  # minExecutors just became 0: the autoscaler's next count decides
            reason = NEEDS_EXECUTORS
            message = (
                "minExecutors is 0: Spark stays on executor pods until the autoscaler finds the "
                "driver alone enough"
            )
    elif desired == 0:
        mode, reason = "local", DRIVER_KEEPS_UP
        message = f"the driver alone keeps the lag target, in local mode ({why})"
    else:
        mode, reason = "executors", NEEDS_EXECUTORS
        message = f"moved to {desired} executor pod(s): {why}"
    if previous is not None and previous.mode == mode:
        if previous.reason == reason or {previous.reason, reason} <= _STICKY:
            return previous  # no move: the count moved within the mode, nothing new to say
        # Same mode, another cause (the spec's bounds changed): say so, keep since.
        return previous.model_copy(update={"reason": reason, "message": message})
    # A move between local mode and executors keeps spec.placement auto's decision and clock.
    auto = {} if stored is None else {
        "wanted": stored.wanted, "pending_since": stored.pending_since, "decision": stored.decision
    }  # fmt: skip
    return PlacementStatus(mode=mode, since=now, reason=reason, message=message, **auto)


def moved(previous: PlacementStatus | None, current: PlacementStatus) -> bool:
    """Whether ``current`` moves the stream (a new driver in the other mode follows)."""
    # A stream leaving a pool says so itself (MovedToDriver): its first mode is no move.
    return previous is not None and previous.mode not in (current.mode, "pooled")
