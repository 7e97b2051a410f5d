"""Executor autoscaling, one round per reconcile, in four steps:

1. observe (:mod:`.collector` over the pure :mod:`.observe`): the driver's report (its executors,
   measured capacity and the Kafka offsets it polled) and the Kafka view with its rates;
2. decide (the pure :mod:`.policy`, or the spec's count in manual mode);
3. act (:mod:`.realizer`): the desired count on the driver pod;
4. explain (:mod:`.explain`): status, the ``Scaling`` condition, Events, metrics.

The model is Flink's autoscaler (collector, evaluator, realizer, event handler); the policy itself
is described in docs/autoscaling.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from deltaflow_api import DeltaIngestion
from deltaflow_api.channel import REPORT_ANNOTATION
from deltaflow_api.driver_pod import SPARK_MODE_ANNOTATION
from deltaflow_api.v1alpha1 import AutoscalerStatus, DeltaIngestionStatus, RecommendationStatus
from deltaflow_operator.autoscaler import explain
from deltaflow_operator.autoscaler.collector import Collector, Stream
from deltaflow_operator.autoscaler.observe import (
    DriverReport,
    KafkaView,
    ReportReading,
    desired_annotation,
)
from deltaflow_operator.autoscaler.policy import (
    Decision,
    History,
    Limits,
    Observation,
    decide,
    lag_seconds,
)
from deltaflow_operator.autoscaler.realizer import DriverPodRealizer
from deltaflow_operator.decisions.freshness import trigger_seconds
from deltaflow_operator.decisions.pod import Pod
from deltaflow_operator.kube import Kube


@dataclass(frozen=True)
class Observed:
    """What one round knows before deciding."""

    reading: ReportReading
    view: KafkaView | None
    kafka_error: str
    running: bool  # the driver pod runs and is not being deleted
    reporting: bool  # ... and its report is fresh
    asked: int | None  # the count already on the pod
    target: int  # the count the driver is working towards

    @property
    def report(self) -> DriverReport | None:
        """The driver's report when it is fresh enough to act on."""
        return self.reading.report if self.reporting else None


class Autoscaler:
    """One per operator. The Kafka offsets come from the driver's report (the driver polls
    Kafka with the stream's own credentials: the operator holds neither a Kafka client nor a
    Secret); only rate baselines and each stream's recent recommendations are kept in memory."""

    def __init__(self, kube: Kube) -> None:
        self.collector = Collector()
        self.realizer = DriverPodRealizer(kube)
        # Per stream, the recommendations of its last round: the status carries them only as
        # often as a steady stream's figures are written (decisions.status), and the policy's
        # windows need every round's (a peak between two writes must hold a scale-down back).
        self._recommendations: dict[str, tuple[RecommendationStatus, ...]] = {}

    def forget(self, namespace: str, name: str) -> None:
        """Drop what is kept of a deleted resource (or one another operator serves)."""
        self.collector.forget(namespace, name)
        self._recommendations.pop(f"{namespace}/{name}", None)

    def step(
        self, ingestion: DeltaIngestion, driver_pod: Pod | None, now: float
    ) -> explain.ScalingOutcome:
        """Observe, decide, act on the driver pod, and say what happened."""
        key = f"{ingestion.namespace}/{ingestion.name}"
        stored = (ingestion.status or DeltaIngestionStatus()).autoscaler
        previous = explain.with_recent(stored, self._recommendations.get(key, ()))
        observed = self.observe(ingestion, driver_pod, now)
        base = explain.base_status(ingestion, previous, observed.reading.report)
        if ingestion.spec.suspend or not observed.running:
            lag = explain.lag_status(observed.view, _lag_seconds(observed.view, None), now)
            return explain.not_scaling(ingestion, base, lag, observed.reading)
        decision = evaluate(ingestion, observed, previous, now)
        local = driver_pod is not None and driver_pod.annotations.get(SPARK_MODE_ANNOTATION) == (
            "local"
        )
        # A local-mode driver has no executors to set: a count above 0 moves the stream to
        # executor pods with a new driver (decisions.placement); a driver on executor pods runs
        # at least one until a local-mode driver replaces it.
        if observed.reporting and not local:
            self.realizer.realize(
                ingestion.namespace, ingestion.name, observed.asked, max(1, decision.desired)
            )
        outcome = explain.outcome(
            ingestion, base, decision, previous, observed.view, observed.reading,
            observed.kafka_error, reporting=observed.reporting, target=observed.target, now=now,
        )  # fmt: skip
        self._recommendations[key] = tuple(outcome.autoscaler.recommendations)
        return outcome

    def observe(self, ingestion: DeltaIngestion, driver_pod: Pod | None, now: float) -> Observed:
        """The driver's report as the operator judges it, the Kafka view, and the counts."""
        stream = Stream(
            ingestion.namespace,
            ingestion.name,
            str(ingestion.metadata.get("uid") or f"{ingestion.namespace}/{ingestion.name}"),
        )
        annotations = driver_pod.annotations if driver_pod is not None else {}
        started = driver_pod.running_since if driver_pod is not None else None
        reading = self.collector.read_report(
            stream,
            annotations.get(REPORT_ANNOTATION),
            None if started is None else started.timestamp(),
            now,
        )
        report = reading.report
        view, kafka_error = self.collector.kafka(stream, report, now)
        running = driver_pod is not None and driver_pod.running
        reporting = running and report is not None and report.fresh(now)
        # The count already asked for is the one on the pod: the driver applies it within ~2 s,
        # and a round in between (the annotation's own pod event wakes one) must not take the
        # report's older target for a new change and say "scaled up" twice.
        asked = desired_annotation(annotations)
        if asked is not None:
            target = asked
        elif reporting and report is not None:
            target = report.target
        else:
            target = ingestion.spec.scaling.min_executors
        return Observed(reading, view, kafka_error, running, reporting, asked, target)


def evaluate(
    ingestion: DeltaIngestion, observed: Observed, previous: AutoscalerStatus, now: float
) -> Decision:
    """The decision of this round: the spec's count in manual mode, else the policy's."""
    scaling, view, report = ingestion.spec.scaling, observed.view, observed.report
    if scaling.mode == "manual":
        return _manual(ingestion, view, observed.target)
    registered = report.registered if report is not None else None
    return decide(
        Observation(
            now=now,
            partitions=None if view is None else view.partitions,
            capacity=report.capacity if report is not None else None,
            driver_reachable=observed.reporting,
            current_executors=registered if registered is not None else observed.target,
            target_executors=observed.target,
            consumption_rate=None if view is None else view.consumption_rate,
            cores_per_executor=ingestion.spec.executor.cores,
            trigger_interval_seconds=trigger_seconds(
                ingestion.spec, None if report is None else report.freshness
            ),
            max_offsets_per_trigger=ingestion.spec.source.max_offsets_per_trigger,
            min_partitions=ingestion.spec.tasks_per_batch(scaled_executors=True),
            # What a count of 0 runs on: the driver's own task threads in local mode.
            local_slots=ingestion.spec.driver.cores if scaling.may_run_locally else 0,
        ),
        Limits(
            min_executors=scaling.min_executors,
            max_executors=scaling.max_executors,
            target_lag_seconds=ingestion.spec.target_lag_seconds,
            scale_up_stabilization_seconds=scaling.scale_up_stabilization_seconds,
            scale_down_stabilization_seconds=scaling.scale_down_stabilization_seconds,
        ),
        explain.history_of(previous),
    )


def _lag_seconds(view: KafkaView | None, throughput: float | None) -> float | None:
    if view is None or view.partitions is None:
        return None
    return lag_seconds(sum(p.lag for p in view.partitions), view.arrival_rate, throughput)


def _manual(ingestion: DeltaIngestion, view: KafkaView | None, target: int) -> Decision:
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
