"""The operator's Prometheus metrics."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

RECONCILES = Counter(
    "deltaflow_operator_reconciles_total", "Reconciliations run", ["namespace", "name"]
)
RECONCILE_ERRORS = Counter(
    "deltaflow_operator_reconcile_errors_total",
    "Reconciliations that raised",
    ["namespace", "name"],
)
RECONCILE_SECONDS = Histogram(
    "deltaflow_operator_reconcile_duration_seconds",
    "Time to reconcile one DeltaIngestion",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
MANAGED_RESOURCES = Gauge(
    "deltaflow_operator_managed_resources", "Kubernetes objects the operator manages", ["kind"]
)
DRIVER_ACTIONS = Counter(
    "deltaflow_operator_driver_actions_total",
    "Driver pods created or deleted",
    ["action", "reason"],
)
STANDING_BACK = Gauge(
    "deltaflow_operator_standing_back_resources",
    "DeltaIngestions this operator leaves to another release that serves them",
)
IS_LEADER = Gauge("deltaflow_operator_leader", "1 while this replica holds the leader Lease")
# Autoscaling (see deltaflow_operator.autoscaler.explain).
LAG_RECORDS = Gauge(
    "deltaflow_operator_kafka_lag_records",
    "Records in the topic the stream has not committed yet",
    ["namespace", "name"],
)
LAG_SECONDS = Gauge(
    "deltaflow_operator_kafka_lag_seconds",
    "Estimated age of the backlog (lag / arrival rate)",
    ["namespace", "name"],
)
EXECUTORS_DESIRED = Gauge(
    "deltaflow_operator_executors_desired", "Executors asked of the driver", ["namespace", "name"]
)
EXECUTORS_CURRENT = Gauge(
    "deltaflow_operator_executors_current",
    "Executors registered with the driver (its report)",
    ["namespace", "name"],
)
SCALING_DECISIONS = Counter(
    "deltaflow_operator_scaling_decisions_total",
    "Autoscaler rounds, by verdict",
    ["namespace", "name", "verdict"],
)
SCALE_ACTIONS = Counter(
    "deltaflow_operator_scale_actions_total",
    "Changes of the executor count",
    ["namespace", "name", "direction"],
)

# Every series labelled with one DeltaIngestion's namespace and name (first two labels).
PER_RESOURCE = (
    RECONCILES,
    RECONCILE_ERRORS,
    LAG_RECORDS,
    LAG_SECONDS,
    EXECUTORS_DESIRED,
    EXECUTORS_CURRENT,
    SCALING_DECISIONS,
    SCALE_ACTIONS,
)


def forget_resource(namespace: str, name: str) -> None:
    """Remove a deleted DeltaIngestion's series: a gone stream must not show a last lag."""
    for metric in PER_RESOURCE:
        # prometheus_client keeps one child per label-value tuple; remove ours, any extra labels.
        for labels in list(metric._metrics):  # the library lists children nowhere else
            if tuple(labels[:2]) == (namespace, name):
                metric.remove(*labels)
