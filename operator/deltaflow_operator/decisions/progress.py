"""Is a running driver's stream making progress? The answer behind ``Ready``.

A pod in phase Running says only that a process runs. The stream is healthy when its driver
reports (its report annotation is fresh) and, if records wait in Kafka, it commits batches. An
idle topic is healthy without batches: Spark runs none when nothing arrives.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from deltaflow_api.reasons import ConditionType, Reason
from deltaflow_api.v1alpha1 import Condition
from deltaflow_operator.autoscaler.observe import REPORT_STALE_SECONDS, DriverReport
from deltaflow_operator.decisions.conditions import condition, set_condition
from deltaflow_operator.decisions.driver import at_text

# Time a new driver gets to start its JVM, its query and its first report.
STARTUP_GRACE_SECONDS = 180.0
# With records waiting, no commit for this long plus two trigger intervals is a stall: the work
# of one batch, and the wait for the trigger just missed and the next.
STALL_SECONDS = 120.0


def stall_after_seconds(trigger_seconds: float) -> float:
    """How long a stream with records waiting may go without a commit before it is stalled.

    Two intervals, not ten: an interval derived from a freshness target is close to the target
    (52 s for 60 s), and ten of them would hide a stall for nine minutes."""
    return STALL_SECONDS + 2 * trigger_seconds


def waiting_since(
    last_batch_at: float, caught_up_at: float | None, started_at: float | None = None
) -> float:
    """Since when records have waited without a commit: the last batch, or later when Kafka
    last held nothing for the stream or its query last started (its first batch is to come)."""
    return max(t for t in (last_batch_at, caught_up_at, started_at) if t is not None)


@dataclass(frozen=True)
class Progress:
    """The verdict: Ready's status (None: Unknown), reason and message."""

    ready: bool | None
    reason: Reason
    message: str
    # Seconds until the verdict changes by time alone (a report going stale, a stall, the
    # start-up grace running out); None: only a new report can change it.
    recheck_in: float | None = None


def stream_progress(
    report: DriverReport | None,
    *,
    running_for: float,
    lag_records: int | None,
    trigger_seconds: float,
    now: float,
    refused: str = "",
    caught_up_at: float | None = None,
) -> Progress:
    """Whether the stream of a driver that has run ``running_for`` seconds makes progress.

    ``report`` as :func:`~deltaflow_operator.autoscaler.observe.read_report` judged it (its times
    no later than the operator saw them); ``refused``: why the annotation held none;
    ``caught_up_at``: when Kafka last held nothing for the stream, if known. Records have waited
    only since then: a topic idle for an hour whose first records arrive is not stalled until
    its first batch (FL9 saw Ready go False for the 50 s to it)."""
    reporting = report is not None and now - report.at <= REPORT_STALE_SECONDS
    if report is None and refused:
        # Not the driver's word (or a driver gone wrong): no sign of progress either way.
        return Progress(
            False,
            Reason.DRIVER_NOT_REPORTING,
            f"the driver's report on its pod was refused: {refused}; its progress cannot be "
            "told until it writes a sound one",
        )
    if not reporting:
        # The report lives on the pod: one there is this driver's, so it has started.
        if report is None and running_for < STARTUP_GRACE_SECONDS:
            return Progress(
                False,
                Reason.STREAM_STARTING,
                "the driver runs; waiting for its first report",
                recheck_in=STARTUP_GRACE_SECONDS - running_for,
            )
        silent = "never reported" if report is None else f"not reported since {_at(report.at)}"
        return Progress(
            False,
            Reason.DRIVER_NOT_REPORTING,
            f"the driver pod runs but its stream has {silent}: it may be hung (see its log; "
            "deleting the pod restarts it from the checkpoint)",
        )
    assert report is not None
    stall_after = stall_after_seconds(trigger_seconds)
    last = report.last_batch_at if report.last_batch_at is not None else now - running_for
    waiting_from = waiting_since(last, caught_up_at)
    quiet = now - waiting_from
    since = _at(last)
    if lag_records == 0 or quiet <= stall_after:
        # A hung driver stops patching its pod, so no event says so: look when its report goes
        # stale, or when the quiet becomes a stall.
        stale_in = report.at + REPORT_STALE_SECONDS - now
        stall_in = stall_after - quiet if lag_records != 0 else stale_in
        return Progress(
            True,
            Reason.STREAMING,
            _streaming(report, lag_records, now),
            recheck_in=max(0.0, min(stale_in, stall_in)),
        )
    if lag_records is None:
        return Progress(
            None,
            Reason.PROGRESS_UNKNOWN,
            f"no batch committed since {since} and Kafka's lag cannot be read: the topic "
            "may be idle or the stream stalled",
        )
    waited = f" since {_at(waiting_from)}" if waiting_from > last else ""
    return Progress(
        False,
        Reason.STREAM_STALLED,
        f"no batch committed since {since} while {lag_records} records wait in Kafka{waited} "
        f"(a stall is {stall_after:.0f}s); see the driver's log",
    )


def _streaming(report: DriverReport, lag_records: int | None, now: float) -> str:
    if report.last_batch_at is None or report.last_batch is None or report.last_batch < 0:
        return "the stream runs and Kafka holds nothing new for it"
    behind = "" if lag_records is None else f"; {lag_records} records behind"
    return (
        f"the stream commits batches: batch {report.last_batch} at "
        f"{_at(report.last_batch_at)}{behind}"
    )


def _at(epoch_seconds: float) -> str:
    return at_text(datetime.fromtimestamp(epoch_seconds, UTC))


def group_commit_degraded(
    conditions: list[Condition],
    error: str,
    *,
    generation: int | None,
    now: datetime,
) -> list[Condition]:
    """``conditions`` with Degraded naming why a running stream's offsets cannot be committed to
    its consumer group (``error``, from its report): the stream goes on and Ready stands, but
    lag tools and KEDA see none of its progress. A Degraded already True says something worse
    and stays; without an error, Degraded is what the driver's verdict made it."""
    degraded = condition(conditions, ConditionType.DEGRADED)
    if not error or (degraded is not None and degraded.status == "True"):
        return conditions
    return set_condition(
        conditions,
        ConditionType.DEGRADED,
        True,
        Reason.KAFKA_GROUP_AUTHORIZATION_FAILED,
        f"the stream runs, but {error}",
        generation,
        now,
    )
