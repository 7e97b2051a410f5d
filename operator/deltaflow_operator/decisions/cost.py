"""``status.cost`` from the driver's report: what the stream cost over the driver's window (its
CPU, executor-seconds and memory; see deltaflow_runtime.cost). Pure."""

from __future__ import annotations

from datetime import UTC, datetime

from deltaflow_api.v1alpha1 import CostStatus
from deltaflow_operator.autoscaler.observe import CostReport, MemberReport
from deltaflow_operator.decisions.pooled import POOL_REPORT_STALE_SECONDS


def cost_status(report: CostReport | None, *, reporting: bool, now: float) -> CostStatus:
    """The status part: the driver's figures while it reports, else nothing (unknown, not 0)."""
    if report is None or not reporting:
        return CostStatus()
    return CostStatus(
        cpu_seconds_per_hour=report.cpu_seconds_per_hour,
        executor_seconds_per_hour=report.executor_seconds_per_hour,
        cpu_seconds_per_million_records=report.cpu_seconds_per_million_records,
        executor_seconds_per_million_records=report.executor_seconds_per_million_records,
        records=report.records,
        window_seconds=report.window_seconds,
        driver_memory_bytes=report.driver_memory_bytes,
        executor_memory_bytes=report.executor_memory_bytes,
        measured_at=datetime.fromtimestamp(now, UTC),
    )


def member_cost_status(
    report: MemberReport | None, reported_at: float | None, now: float
) -> CostStatus:
    """A pooled stream's part, for chargeback: the CPU its batches' tasks took of its pool's
    threads (busyCores, over five minutes) per hour, and no executor pod. The pool's own JVM
    and idle threads are the pool's, not shared out; unknown (not 0) without a fresh reading."""
    if (
        report is None
        or report.busy_cores is None
        or reported_at is None
        or now - reported_at > POOL_REPORT_STALE_SECONDS
    ):
        return CostStatus()
    return CostStatus(
        cpu_seconds_per_hour=round(report.busy_cores * 3600, 1),
        executor_seconds_per_hour=0.0,
        measured_at=datetime.fromtimestamp(min(reported_at, now), UTC),
    )
