"""Does the stream hold its freshness target? The answer behind the ``Freshness`` condition and
``status.freshness`` (pure: the driver's measured ages in, the verdict out).

The driver measures each record's age at its Delta commit (deltaflow_runtime.freshness) and plans
its trigger so that a record waits at most one interval and its batch (deltaflow_api.cadence).
Two ways to miss the target, told apart because their fixes differ: batches slower than the
target allows even with nothing waiting (a plan that cannot hold: raise the target or make
batches faster), and a stream that is behind (records pile up: the autoscaler's business).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from deltaflow_api.cadence import plan_trigger
from deltaflow_api.reasons import Reason
from deltaflow_api.v1alpha1 import DeltaIngestionSpec, FreshnessStatus
from deltaflow_operator.autoscaler.observe import FreshnessReport


@dataclass(frozen=True)
class FreshnessVerdict:
    """The status part and the condition: status (None: Unknown), reason, message."""

    status: FreshnessStatus
    holds: bool | None
    reason: Reason
    message: str


def behind(verdict: FreshnessVerdict) -> bool:
    """Whether the stream misses its freshness target (where it runs cannot keep it), as
    opposed to not being measured or having nothing to land."""
    return verdict.holds is False and verdict.reason in (
        Reason.BEHIND_TARGET,
        Reason.TARGET_UNREACHABLE,
    )


def trigger_seconds(spec: DeltaIngestionSpec, report: FreshnessReport | None) -> float:
    """The interval between batch starts: what the driver says it runs, else what it would
    plan before measuring a batch (the autoscaler models batches at this interval)."""
    if report is not None:
        return report.trigger_seconds
    return plan_trigger(
        spec.freshness.target_seconds, None, spec.trigger.pinned_seconds
    ).interval_seconds


def freshness_verdict(
    spec: DeltaIngestionSpec,
    report: FreshnessReport | None,
    *,
    reporting: bool,
    lag_seconds: float | None,
    now: float,
) -> FreshnessVerdict:
    """The Freshness condition of a stream whose driver reported ``report`` (None: no driver,
    or one that does not report freshness), with the backlog's age as the autoscaler measured it
    this round (records waiting / arrival rate; None: unknown)."""
    target = spec.freshness.target_seconds
    if report is None or not reporting:
        return FreshnessVerdict(
            FreshnessStatus(target_seconds=target),
            None,
            Reason.DRIVER_NOT_REPORTING,
            "the driver does not report its freshness (not running, or not reporting yet)",
        )
    status = FreshnessStatus(
        target_seconds=target,
        p50_seconds=report.p50_seconds,
        p99_seconds=report.p99_seconds,
        window_seconds=report.window_seconds,
        batches=report.batches,
        records=report.records,
        trigger_seconds=report.trigger_seconds,
        trigger_pinned=report.trigger_pinned,
        batch_seconds=report.batch_seconds,
        measured_at=datetime.fromtimestamp(now, UTC),
    )
    # Unreachable only on a measured batch time: the default one is a guess.
    unreachable = not report.reachable and report.batch_seconds_measured
    p99 = report.p99_seconds
    window = f"{_s(report.window_seconds)} s"
    if unreachable and (p99 is None or p99 > target):
        measured = "" if p99 is None else f"p99 age {_s(p99)} s over the last {window}: "
        return FreshnessVerdict(
            status, False, Reason.TARGET_UNREACHABLE, f"{measured}{report.plan}"
        )
    if lag_seconds is not None and lag_seconds > target:
        # Records already waited longer than the target: late, whatever landed before.
        return FreshnessVerdict(
            status,
            False,
            Reason.BEHIND_TARGET,
            f"records wait in Kafka for about {_s(lag_seconds)} s, over the {target} s target: "
            "the stream is behind (the Scaling condition says what the autoscaler does)",
        )
    if p99 is None or report.records == 0:
        return FreshnessVerdict(
            status,
            None,
            Reason.NO_RECENT_RECORDS,
            f"no record landed in the last {window}: nothing to measure (an idle topic runs "
            f"no batch); {report.plan}",
        )
    of = f"{report.records} records in {report.batches} batches over the last {window}"
    if p99 <= target:
        return FreshnessVerdict(
            status,
            True,
            Reason.ON_TARGET,
            f"p99 age {_s(p99)} s within the {target} s target ({of}); {report.plan}",
        )
    return FreshnessVerdict(
        status,
        False,
        Reason.BEHIND_TARGET,
        f"p99 age {_s(p99)} s is over the {target} s target ({of}): records waited longer "
        "than the trigger plans for, so the stream was behind (the Scaling condition says "
        f"what the autoscaler does); {report.plan}",
    )


def _s(seconds: float) -> str:
    return f"{seconds:g}" if seconds == int(seconds) else f"{seconds:.1f}"
