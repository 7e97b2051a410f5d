"""Executor autoscaling, wired: observe (the driver's report: its executors, measured capacity and
the Kafka offsets it polled), decide (the pure
:mod:`deltaflow_operator.autoscaler.policy`), act (the desired count on the driver pod), explain
(status, the ``Scaling`` condition, Events, metrics).

The policy's memory (recent recommendations, the last action) lives in ``status.autoscaler``, so
a new leader continues where the old one stopped. Only rate baselines are in memory: after a
restart the first round measures, and holds.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from deltaflow_api import DeltaIngestion
from deltaflow_api.channel import DESIRED_ANNOTATION, REPORT_ANNOTATION
from deltaflow_api.reasons import EventReason, Reason
from deltaflow_api.v1alpha1 import (
    AutoscalerStatus,
    CapacityStatus,
    DeltaIngestionStatus,
    ExecutorStatus,
    LagStatus,
    PartitionLagStatus,
    RecommendationStatus,
    ScaleActionStatus,
)
from deltaflow_operator import metrics
from deltaflow_operator.autoscaler.observe import (
    MIN_RATE_INTERVAL_SECONDS,
    DriverReport,
    KafkaView,
    OffsetSnapshot,
    ReportReading,
    Sighting,
    desired_annotation,
    kafka_view,
    read_report,
    with_rates,
)
from deltaflow_operator.autoscaler.policy import (
    Decision,
    History,
    LastAction,
    Limits,
    Observation,
    Recommendation,
    decide,
    lag_seconds,
)
from deltaflow_operator.builders.common import driver_pod_name, labels
from deltaflow_operator.decisions.driver import Event, running_since
from deltaflow_operator.kube import Kube

log = logging.getLogger(__name__)

# A Kafka view older than this is not acted on (the driver polls every 5 s): the broker or the
# driver is treated as unreachable.
VIEW_STALE_SECONDS = 60.0
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
    from datetime import UTC, datetime

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


@dataclass
class _Watch:
    """One resource's readings: the rate baseline, the last Kafka view and its time, and what
    the operator saw of the driver's report (by its own clock)."""

    uid: str
    baseline: tuple[OffsetSnapshot, KafkaView] | None = None
    view: KafkaView | None = None
    view_at: float = 0.0
    error: str = ""
    sighting: Sighting | None = None


class Autoscaler:
    """One per operator. The Kafka offsets come from the driver's report (the driver polls
    Kafka with the stream's own credentials: the operator holds neither a Kafka client nor a
    Secret); only rate baselines are kept in memory."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self._watches: dict[str, _Watch] = {}
        self._lock = threading.Lock()

    # --- observe ---------------------------------------------------------------------------
    def _watch(self, ingestion: DeltaIngestion) -> _Watch:
        """The resource's readings (call with the lock held); new for a new incarnation."""
        key = f"{ingestion.namespace}/{ingestion.name}"
        uid = str(ingestion.metadata.get("uid") or key)
        watch = self._watches.get(key)
        if watch is None or watch.uid != uid:
            watch = self._watches[key] = _Watch(uid)
        return watch

    def read_report(
        self, ingestion: DeltaIngestion, driver_pod: dict[str, Any] | None, now: float
    ) -> ReportReading:
        """The driver's report as the operator judges it (see
        :func:`~deltaflow_operator.autoscaler.observe.read_report`); a refusal is logged once."""
        annotations = ((driver_pod or {}).get("metadata") or {}).get("annotations") or {}
        text = annotations.get(REPORT_ANNOTATION)
        started = running_since(driver_pod) if driver_pod is not None else None
        with self._lock:
            watch = self._watch(ingestion)
            seen = watch.sighting
            reading = read_report(
                text if isinstance(text, str) else None,
                now=now,
                seen=seen,
                started_at=None if started is None else started.timestamp(),
            )
            watch.sighting = reading.sighting
        if reading.refused and reading.sighting is not seen:
            log.warning(
                "the driver report of %s/%s is refused: %s",
                ingestion.namespace,
                ingestion.name,
                reading.refused,
            )
        return reading

    def observe_kafka(
        self, ingestion: DeltaIngestion, report: DriverReport | None, now: float
    ) -> tuple[KafkaView | None, str]:
        """The freshest Kafka view (None when there is none recent) and the driver's last Kafka
        error; a snapshot is used once, so rates span two distinct polls."""
        with self._lock:
            watch = self._watch(ingestion)
            if report is not None and report.kafka is not None:
                if watch.baseline is None or report.kafka.at > watch.view_at:
                    self._advance(watch, report.kafka)
            elif report is not None and report.kafka_error:
                watch.error = report.kafka_error
            fresh = watch.view is not None and now - watch.view_at <= VIEW_STALE_SECONDS
            return (watch.view if fresh else None), watch.error

    @staticmethod
    def _advance(watch: _Watch, snapshot: OffsetSnapshot) -> None:
        base = watch.baseline
        if base is not None and snapshot.at - base[0].at < MIN_RATE_INTERVAL_SECONDS:
            # Too soon for a rate: this read's lag with the last measured rates, per partition
            # too (without them every round between two measurements would be Unknown).
            lag = kafka_view(None, snapshot)
            watch.view = KafkaView(
                with_rates(lag.partitions, base[1].partitions),
                base[1].consumption_rate,
                base[1].arrival_rate,
            )
        else:
            watch.view = kafka_view(base[0] if base is not None else None, snapshot)
            watch.baseline = (snapshot, watch.view)
        watch.view_at, watch.error = snapshot.at, ""

    def forget(self, namespace: str, name: str) -> None:
        """Drop what is kept of a deleted resource."""
        with self._lock:
            self._watches.pop(f"{namespace}/{name}", None)

    # --- one round -------------------------------------------------------------------------
    def step(
        self, ingestion: DeltaIngestion, driver_pod: dict[str, Any] | None, now: float
    ) -> ScalingOutcome:
        """Observe, decide, act on the driver pod, and say what happened."""
        ns, name = ingestion.namespace, ingestion.name
        previous = (ingestion.status or DeltaIngestionStatus()).autoscaler
        scaling = ingestion.spec.scaling

        reading = self.read_report(ingestion, driver_pod, now)
        report = reading.report
        view, kafka_error = self.observe_kafka(ingestion, report, now)
        running = (
            driver_pod is not None
            and (driver_pod.get("status") or {}).get("phase") == "Running"
            and not (driver_pod.get("metadata") or {}).get("deletionTimestamp")
        )
        reporting = running and report is not None and report.fresh(now)
        base = AutoscalerStatus(
            mode=scaling.mode, capacity=_capacity_status(report), **_history_fields(previous)
        )

        if ingestion.spec.suspend or not running:
            why = "suspended" if ingestion.spec.suspend else "the driver is not running"
            return ScalingOutcome(
                executors=ExecutorStatus(selector=executor_selector(ingestion)),
                lag=lag_status(view, _lag_seconds(view, None), now),
                autoscaler=base.model_copy(
                    update={"verdict": "Idle", "reason": f"no scaling: {why}"}
                ),
                condition=(False, Reason.DRIVER_NOT_RUNNING, f"no scaling: {why}"),
                reading=reading,
            )

        assert report is None or isinstance(report, DriverReport)
        registered = report.registered if reporting and report is not None else None
        # The count already asked for is the one on the pod: the driver applies it within ~2 s,
        # and a round in between (the annotation's own pod event wakes one) must not take the
        # report's older target for a new change and say "scaled up" twice.
        asked = desired_annotation(driver_pod)
        target = (
            asked
            if asked is not None
            else report.target
            if reporting and report is not None
            else scaling.min_executors
        )
        if scaling.mode == "manual":
            decision = _manual(ingestion, view, target, now)
        else:
            decision = decide(
                Observation(
                    now=now,
                    partitions=None if view is None else view.partitions,
                    capacity=report.capacity if reporting and report is not None else None,
                    driver_reachable=reporting,
                    current_executors=registered if registered is not None else target,
                    target_executors=target,
                    consumption_rate=None if view is None else view.consumption_rate,
                    cores_per_executor=ingestion.spec.executor.cores,
                    trigger_interval_seconds=trigger_seconds(ingestion),
                    max_offsets_per_trigger=ingestion.spec.source.max_offsets_per_trigger,
                    min_partitions=ingestion.spec.tasks_per_batch(scaled_executors=True),
                ),
                Limits(
                    min_executors=scaling.min_executors,
                    max_executors=scaling.max_executors,
                    target_lag_seconds=scaling.target_lag_seconds,
                    scale_up_stabilization_seconds=scaling.scale_up_stabilization_seconds,
                    scale_down_stabilization_seconds=scaling.scale_down_stabilization_seconds,
                ),
                history_of(previous),
            )

        events: list[Event] = []
        if reporting and desired_annotation(driver_pod) != decision.desired:
            self.kube.annotate_pod(
                ns, driver_pod_name(name), {DESIRED_ANNOTATION: str(decision.desired)}
            )
        if reporting and decision.desired != target:
            up = decision.desired > target
            direction = EventReason.SCALED_UP if up else EventReason.SCALED_DOWN
            events.append(Event("Normal", direction, decision.reason))
            metrics.SCALE_ACTIONS.labels(ns, name, direction).inc()
        if decision.verdict in LIMIT_VERDICTS and decision.verdict != previous.verdict:
            limit = EventReason(f"Scaling{decision.verdict}")
            events.append(Event("Warning", limit, decision.reason))
        metrics.SCALING_DECISIONS.labels(ns, name, decision.verdict).inc()
        self._export(ingestion, decision, registered)

        pending = (
            max(0, report.target - report.registered) if reporting and report is not None else None
        )
        autoscaler = base.model_copy(
            update={
                "verdict": decision.verdict,
                "reason": decision.reason,
                **history_status(decision.history),
            }
        )
        return ScalingOutcome(
            executors=ExecutorStatus(
                desired=decision.desired,
                current=registered,
                pending=pending,
                selector=executor_selector(ingestion),
            ),
            lag=lag_status(view, decision.lag_seconds, now),
            autoscaler=autoscaler,
            condition=_condition(decision, kafka_error, reporting, registered, reading.refused),
            events=events,
            reading=reading,
        )

    @staticmethod
    def _export(ingestion: DeltaIngestion, decision: Decision, registered: int | None) -> None:
        ns, name = ingestion.namespace, ingestion.name
        metrics.EXECUTORS_DESIRED.labels(ns, name).set(decision.desired)
        if registered is not None:
            metrics.EXECUTORS_CURRENT.labels(ns, name).set(registered)
        if decision.lag_records is not None:
            metrics.LAG_RECORDS.labels(ns, name).set(decision.lag_records)
        if decision.lag_seconds is not None:
            metrics.LAG_SECONDS.labels(ns, name).set(decision.lag_seconds)


def _history_fields(status: AutoscalerStatus) -> dict[str, Any]:
    return {
        "recommendations": status.recommendations,
        "last_action": status.last_action,
        "ineffective_since": status.ineffective_since,
        "shortfall_since": status.shortfall_since,
    }


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


def trigger_seconds(ingestion: DeltaIngestion) -> float:
    """spec.trigger.interval in seconds."""
    text = ingestion.spec.trigger.interval
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    unit = "ms" if text.endswith("ms") else text[-1]
    return float(text[: -len(unit)]) * units[unit]


def _lag_seconds(view: KafkaView | None, throughput: float | None) -> float | None:
    if view is None or view.partitions is None:
        return None
    return lag_seconds(sum(p.lag for p in view.partitions), view.arrival_rate, throughput)


def _manual(ingestion: DeltaIngestion, view: KafkaView | None, target: int, now: float) -> Decision:
    scaling = ingestion.spec.scaling
    desired = scaling.executors if scaling.executors is not None else scaling.min_executors
    source = "spec.scaling.executors" if scaling.executors is not None else "minExecutors"
    change = f"holding {desired}" if desired == target else f"{target} -> {desired}"
    return Decision(
        desired=desired,
        verdict="Manual",
        reason=f"{change} executors, set by {source} (scaling.mode manual)",
        lag_records=None
        if view is None or view.partitions is None
        else sum(p.lag for p in view.partitions),
        lag_seconds=_lag_seconds(view, view.consumption_rate if view is not None else None),
        arrival_rate=None if view is None else view.arrival_rate,
        history=History(),
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
