"""A pooled stream's Ready and Degraded, from what its pool reported of it (pure).

The pool's report (``autoscaler.observe.MemberReport``) says the member's phase, its failures in
a row and the last one's reason; this turns it into the conditions a user reads, naming the
pool and what happens next.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from deltaflow_api.failures import FailureReason
from deltaflow_api.reasons import Reason
from deltaflow_operator.autoscaler.observe import MemberReport, PoolReport
from deltaflow_operator.decisions.progress import stall_after_seconds, waiting_since

# A pool publishes its report at least every 30 s (its heartbeat, at once on a change of
# word): a report this old says the pool stopped reporting.
POOL_REPORT_STALE_SECONDS = 60.0


@dataclass(frozen=True)
class MemberVerdict:
    """Ready and Degraded of a pooled stream, with the words for both."""

    ready: bool
    degraded: bool
    reason: Reason
    message: str


def _known_reason(text: str) -> Reason:
    """The runtime's failure reason when it is one (a condition's reason is a fixed word)."""
    known = {str(r) for r in FailureReason} & {str(r) for r in Reason}
    return Reason(text) if text in known else Reason.MEMBER_FAILED


@dataclass(frozen=True)
class BatchSighting:
    """When the operator first saw the member's last batch id in its pool's reports, and when
    a report last said Kafka held nothing for it (the operator's clock)."""

    batch: int | None
    seen_at: float
    caught_up_at: float | None = None


def member_verdict(
    pool: str | None,
    report: MemberReport | None,
    reported_at: float | None,
    now: float,
    degraded_after_failures: int,
    *,
    trigger_seconds: float,
    sighting: BatchSighting | None = None,
) -> MemberVerdict:
    """What the pool's last word on the member means for its conditions. A member that runs
    but commits no batch while records wait is stalled as a driver of its own would be (a
    member the pool's task threads do not reach reads so, not "no recent records")."""
    if pool is None:
        return MemberVerdict(
            False, False, Reason.WAITING_FOR_POOL,
            "waiting for a place in a pool (the operator packs pooled streams every few seconds)",
        )  # fmt: skip
    if reported_at is None or now - reported_at > POOL_REPORT_STALE_SECONDS:
        # The time of its last report, not its age: the status changes only when that does.
        age = (
            "has not reported yet"
            if reported_at is None
            else "has not reported since "
            + datetime.fromtimestamp(reported_at, UTC).isoformat(timespec="seconds")
        )
        return MemberVerdict(
            False, reported_at is not None, Reason.POOL_NOT_REPORTING,
            f"pool {pool} {age} (see the pod {pool}: its events and log)",
        )  # fmt: skip
    if report is None or report.phase == "Starting":
        return MemberVerdict(
            False, False, Reason.STREAM_STARTING, f"starting in pool {pool} (pod {pool})"
        )
    if report.phase == "Running":
        stalled = _stalled(pool, report, sighting, now, trigger_seconds)
        if stalled is not None:
            return stalled
        return MemberVerdict(True, False, Reason.STREAMING, f"running in pool {pool} (pod {pool})")
    failure = report.message or report.reason or "no reason given"
    if report.phase == "BackingOff":
        retry = (
            ""
            if report.retry_at is None
            else " It starts again at "
            + datetime.fromtimestamp(report.retry_at, UTC).isoformat(timespec="seconds")
            + "."
        )
        return MemberVerdict(
            False,
            report.failures >= degraded_after_failures,
            _known_reason(report.reason),
            f"failed {report.failures} time(s) in a row in pool {pool}: {failure}.{retry}",
        )
    if report.phase in ("NeedsAction", "Invalid"):
        return MemberVerdict(
            False,
            True,
            _known_reason(report.reason),
            f"failed in pool {pool}, which a restart cannot fix: {failure}. It starts again "
            "when its spec changes.",
        )
    return MemberVerdict(False, False, Reason.LEAVING_POOL, f"stopping in pool {pool}")


def _stalled(
    pool: str,
    report: MemberReport,
    sighting: BatchSighting | None,
    now: float,
    trigger_seconds: float,
) -> MemberVerdict | None:
    if sighting is None or not report.lag_records or sighting.batch != report.last_batch:
        return None  # nothing waits, or not known since when
    waiting_from = waiting_since(sighting.seen_at, sighting.caught_up_at, report.started_at)
    stall_after = stall_after_seconds(trigger_seconds)
    if now - waiting_from <= stall_after:
        return None
    since = datetime.fromtimestamp(waiting_from, UTC).isoformat(timespec="seconds")
    return MemberVerdict(
        False,
        False,
        Reason.STREAM_STALLED,
        f"no batch committed in pool {pool} since {since} while {report.lag_records} records "
        f"wait in Kafka (a stall is {stall_after:.0f}s): its batches get none of the pool's "
        f"task threads, or hang (see the pod {pool}: its log)",
    )


def pool_behind(report: PoolReport | None, member: str) -> bool:
    """Whether most of the pool's other members miss their freshness targets too: then the pool
    (its share of the node) is short, not the member, and a driver of its own for each would
    ask the node for still more (forty trickles leaving a starved pool at once found no room).
    Only members with a measured p99 and target count, and at least two of them: in a pool of
    two, one starving the other must not shield itself."""
    if report is None:
        return False
    judged = [
        fresh.p99_seconds > fresh.target_seconds
        for key, said in report.members.items()
        if key != member
        and (fresh := said.freshness) is not None
        and fresh.p99_seconds is not None
        and fresh.target_seconds is not None
    ]
    return len(judged) >= 2 and sum(judged) * 2 > len(judged)
