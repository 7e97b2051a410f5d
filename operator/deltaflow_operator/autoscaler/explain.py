"""Explain: what a round of autoscaling observed and decided, told to the user as the status
(``status.executors``, ``status.lag``, ``status.autoscaler``), the ``Scaling`` condition, Events and
metrics (Flink's autoscaler has its event handler for the same).

The policy's memory (recent recommendations, the last action) is kept in ``status.autoscaler``, so
a new leader continues where the old one stopped: :func:`history_of` reads it back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from deltaflow_api import DeltaIngestion
from deltaflow_api.reasons import EventReason, Reason
from deltaflow_api.v1alpha1 import (
    AutoscalerStatus,
    CapacityStatus,
    ExecutorStatus,
    LagStatus,
    PartitionLagStatus,
    RecommendationStatus,
    ScaleActionStatus,
)
from deltaflow_operator import metrics
from deltaflow_operator.autoscaler.observe import DriverReport, KafkaView, ReportReading
from deltaflow_operator.autoscaler.policy import Decision, History, LastAction, Recommendation
from deltaflow_operator.builders.common import labels
from deltaflow_operator.decisions.driver import Event

WORST_PARTITIONS = 3
# Verdicts that say "more executors would not help": worth a Warning when they first appear
# (the Event's reason: Scaling<verdict>).
LIMIT_VERDICTS = ("Ineffective", "HotPartition", "BatchCap", "PartitionCeiling", "AtMaximum")


@dataclass
class ScalingOutcome:
    """What one round decided, for the status and the user."""

    executors: ExecutorStatus
    lag: LagStatus
    autoscaler: AutoscalerStatus
    condition: tuple[bool | None, Reason, str]  # Scaling condition: status, reason, message
    events: list[Event] = field(default_factory=list)
    # The driver's report as this round judged it (Ready reads the same one).
    reading: ReportReading = field(default_factory=lambda: ReportReading(None))


def history_of(status: AutoscalerStatus) -> History:
    """The policy's memory, as kept in the status."""
    action = status.last_action
    return History(
        recommendations=tuple(
            Recommendation(at=r.at, executors=r.executors, arrival_rate=r.arrival_rate)
            for r in status.recommendations
        ),
        last_action=None
        if action is None
        else LastAction(
            at=action.at,
            from_executors=action.from_executors,
            to_executors=action.to_executors,
            expected_rate=action.expected_rate,
        ),
        ineffective_since=status.ineffective_since,
        shortfall_since=status.shortfall_since,
    )


def with_recent(
    stored: AutoscalerStatus, recent: tuple[RecommendationStatus, ...]
) -> AutoscalerStatus:
    """The stored memory with the recommendations this process made since its last write added
    (a steady stream's status is written every other minute, decisions.status; the policy
    prunes what its windows no longer need)."""
    if not recent:
        return stored
    merged = {r.at: r for r in (*stored.recommendations, *recent)}
    return stored.model_copy(update={"recommendations": [merged[at] for at in sorted(merged)]})


def history_status(history: History) -> dict[str, Any]:
    """The policy's memory as status fields (the inverse of :func:`history_of`)."""
    action = history.last_action
    return {
        "recommendations": [
            RecommendationStatus(at=r.at, executors=r.executors, arrival_rate=r.arrival_rate)
            for r in history.recommendations
        ],
        "last_action": None
        if action is None
        else ScaleActionStatus(
            at=action.at,
            from_executors=action.from_executors,
            to_executors=action.to_executors,
            expected_rate=action.expected_rate,
        ),
        "ineffective_since": history.ineffective_since,
        "shortfall_since": history.shortfall_since,
    }


def executor_selector(ingestion: DeltaIngestion) -> str:
    """Label selector of the stream's executor pods (the /scale subresource's selector)."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels(ingestion, "executor").items()))


def lag_status(view: KafkaView | None, seconds: float | None, now: float) -> LagStatus:
    """status.lag from a Kafka view; everything unknown when Kafka could not be read."""
    if view is None or view.partitions is None:
        return LagStatus()
    worst = sorted(view.partitions, key=lambda p: p.lag, reverse=True)[:WORST_PARTITIONS]
    return LagStatus(
        records=sum(p.lag for p in view.partitions),
        seconds=None if seconds is None else round(seconds, 1),
        arrival_rate=None if view.arrival_rate is None else round(view.arrival_rate, 1),
        consumption_rate=None if view.consumption_rate is None else round(view.consumption_rate, 1),
        worst_partitions=[
            PartitionLagStatus(topic=p.topic, partition=p.partition, records=p.lag)
            for p in worst
            if p.lag > 0
        ],
        measured_at=datetime.fromtimestamp(now, UTC),
    )


def base_status(
    ingestion: DeltaIngestion, previous: AutoscalerStatus, report: DriverReport | None
) -> AutoscalerStatus:
    """``status.autoscaler`` before this round's verdict: the mode, the measured capacity and
    the policy's memory as it was."""
    return AutoscalerStatus(
        mode=ingestion.spec.scaling.mode,
        capacity=_capacity_status(report),
        recommendations=previous.recommendations,
        last_action=previous.last_action,
        ineffective_since=previous.ineffective_since,
        shortfall_since=previous.shortfall_since,
    )


def not_scaling(
    ingestion: DeltaIngestion, base: AutoscalerStatus, lag: LagStatus, reading: ReportReading
) -> ScalingOutcome:
    """The outcome of a round with nothing to scale: suspended, or no running driver."""
    why = "suspended" if ingestion.spec.suspend else "the driver is not running"
    return ScalingOutcome(
        executors=ExecutorStatus(selector=executor_selector(ingestion)),
        lag=lag,
        autoscaler=base.model_copy(update={"verdict": "Idle", "reason": f"no scaling: {why}"}),
        condition=(False, Reason.DRIVER_NOT_RUNNING, f"no scaling: {why}"),
        reading=reading,
    )


def outcome(  # noqa: PLR0917 - what a round knows, each a different fact
    ingestion: DeltaIngestion,
    base: AutoscalerStatus,
    decision: Decision,
    previous: AutoscalerStatus,
    view: KafkaView | None,
    reading: ReportReading,
    kafka_error: str,
    *,
    reporting: bool,
    target: int,
    now: float,
) -> ScalingOutcome:
    """The status, condition and Events of a round that decided, and its metrics exported."""
    report = reading.report if reporting else None
    registered = report.registered if report is not None else None
    _export(ingestion, decision, registered)
    return ScalingOutcome(
        executors=ExecutorStatus(
            desired=decision.desired,
            current=registered,
            pending=None if report is None else max(0, report.target - report.registered),
            selector=executor_selector(ingestion),
        ),
        lag=lag_status(view, decision.lag_seconds, now),
        autoscaler=base.model_copy(
            update={
                "verdict": decision.verdict,
                "reason": decision.reason,
                **history_status(decision.history),
            }
        ),
        condition=_condition(decision, kafka_error, reporting, registered, reading.refused),
        events=_events(ingestion, decision, previous, reporting=reporting, target=target),
        reading=reading,
    )


def _events(
    ingestion: DeltaIngestion,
    decision: Decision,
    previous: AutoscalerStatus,
    *,
    reporting: bool,
    target: int,
) -> list[Event]:
    """A Normal Event for each change of the count; a Warning when a limit first shows."""
    events: list[Event] = []
    if reporting and decision.desired != target:
        direction = EventReason.SCALED_UP if decision.desired > target else EventReason.SCALED_DOWN
        events.append(Event("Normal", direction, decision.reason))
        metrics.SCALE_ACTIONS.labels(ingestion.namespace, ingestion.name, direction).inc()
    if decision.verdict in LIMIT_VERDICTS and decision.verdict != previous.verdict:
        events.append(Event("Warning", EventReason(f"Scaling{decision.verdict}"), decision.reason))
    return events


def _export(ingestion: DeltaIngestion, decision: Decision, registered: int | None) -> None:
    ns, name = ingestion.namespace, ingestion.name
    metrics.SCALING_DECISIONS.labels(ns, name, decision.verdict).inc()
    metrics.EXECUTORS_DESIRED.labels(ns, name).set(decision.desired)
    if registered is not None:
        metrics.EXECUTORS_CURRENT.labels(ns, name).set(registered)
    if decision.lag_records is not None:
        metrics.LAG_RECORDS.labels(ns, name).set(decision.lag_records)
    if decision.lag_seconds is not None:
        metrics.LAG_SECONDS.labels(ns, name).set(decision.lag_seconds)


def _capacity_status(report: DriverReport | None) -> CapacityStatus | None:
    if report is None or report.capacity is None:
        return None
    cap = report.capacity
    return CapacityStatus(
        records_per_core_second=cap.records_per_core_second,
        batch_overhead_seconds=cap.batch_overhead_seconds,
        batches=cap.batches,
        fitted=cap.fitted,
        executor_start_seconds=cap.executor_start_seconds,
    )


def _condition(
    decision: Decision,
    kafka_error: str,
    reporting: bool,
    registered: int | None,
    refused: str = "",
) -> tuple[bool | None, Reason, str]:
    """The Scaling condition: True while converging, False when settled or limited, Unknown
    when an input is missing (the count is held). Its reason is the verdict (every verdict is a
    Reason: the policy stays free of the API, the unit tests check it) or the missing input."""
    if decision.verdict == "Unknown":
        if kafka_error:
            return None, Reason.KAFKA_UNREACHABLE, f"{decision.reason} ({kafka_error})"
        if not reporting:
            why = f" (its report was refused: {refused})" if refused else ""
            return None, Reason.DRIVER_NOT_REPORTING, decision.reason + why
        return None, Reason.MEASURING, decision.reason
    verdict = Reason(decision.verdict)
    if registered is not None and registered != decision.desired:
        return True, verdict, decision.reason
    if decision.verdict in ("ScaleUp", "ScaleDown"):
        return True, verdict, decision.reason
    return False, verdict, decision.reason
