"""``status.cost`` from the driver's report: what the stream cost over the driver's window (its
CPU, executor-seconds and memory; see deltaflow_runtime.cost). Pure."""

from __future__ import annotations

from datetime import UTC, datetime

from deltaflow_api.v1alpha1 import CostStatus
from deltaflow_operator.autoscaler.observe import CostReport


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
