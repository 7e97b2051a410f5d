"""The operator's condition types, condition reasons and Event reasons: one vocabulary.

These strings are an interface, not prose: the README's conditions table documents them,
``kubectl wait --for=condition=Ready`` and ``kubectl get`` columns read them, and alerts and
dashboards match on them. As enums, a typo is a type error instead of a reason no alert ever
matches, and every reason the operator can set is listed here (the unit tests check the README
against this list). The values are the wire strings: a ``StrEnum`` member is a ``str``, so the
status and the Events read exactly as before.

A failure a restart cannot fix keeps the runtime's own reason (``api/failures.py``) on the
conditions and the Event; those members take their value from :class:`FailureReason`.
"""

from __future__ import annotations

from enum import StrEnum

from deltaflow_api.failures import FailureReason


class ConditionType(StrEnum):
    """The conditions of a DeltaIngestion's status."""

    READY = "Ready"
    PROGRESSING = "Progressing"
    DEGRADED = "Degraded"
    SUSPENDED = "Suspended"
    SCALING = "Scaling"
    FRESHNESS = "Freshness"


class Reason(StrEnum):
    """The reason of a condition."""

    # The driver's life (Ready, Progressing, Degraded, Suspended).
    RUNNING = "Running"  # Suspended=False
    SUSPENDED = "Suspended"
    HEALTHY = "Healthy"  # Degraded=False
    DRIVER_STARTING = "DriverStarting"
    DRIVER_PENDING = "DriverPending"
    UNSCHEDULABLE = "Unschedulable"
    IMAGE_PULL_FAILED = "ImagePullFailed"
    # A Secret or key the spec references does not exist (the kubelet says which).
    SECRET_MISSING = "SecretMissing"
    # The kubelet cannot build the container for another reason.
    CONTAINER_CONFIG_ERROR = "ContainerConfigError"
    DRIVER_REPLACING = "DriverReplacing"
    # The previous driver pod is terminating; no new one starts until it is gone.
    DRIVER_STOPPING = "DriverStopping"
    # The previous driver pod is still there past its grace period (its node may be down).
    DRIVER_STUCK_TERMINATING = "DriverStuckTerminating"
    DRIVER_FAILED = "DriverFailed"
    # A failed driver waits out its restart backoff.
    BACKOFF_WAITING = "BackoffWaiting"
    # The driver failed degradedAfterFailures times in a row.
    DRIVER_CRASH_LOOPING = "DriverCrashLooping"
    # Progressing=False: the runtime's failure needs a person (Ready and Degraded say which).
    NEEDS_ACTION = "NeedsAction"
    # The stream's progress (Ready, while the driver pod runs).
    STREAM_STARTING = "StreamStarting"
    STREAMING = "Streaming"
    # Also the Scaling condition's reason (Unknown) when the report is stale.
    DRIVER_NOT_REPORTING = "DriverNotReporting"
    # Records wait in Kafka and no batch commits.
    STREAM_STALLED = "StreamStalled"
    # No batch for a while and Kafka's lag cannot be read: idle or stalled.
    PROGRESS_UNKNOWN = "ProgressUnknown"
    # The operator itself: an API call of the reconcile failed (retried).
    RECONCILE_FAILED = "ReconcileFailed"
    # A pooled stream (spec.placement: pooled): waiting for its driver to go, a pool, or its
    # start there; its pool stopped reporting; a member failing in its pool, waiting to retry.
    LEAVING_DRIVER = "LeavingDriver"
    LEAVING_POOL = "LeavingPool"
    WAITING_FOR_POOL = "WaitingForPool"
    POOL_NOT_REPORTING = "PoolNotReporting"
    MEMBER_FAILED = "MemberFailed"
    # The spec is invalid: the operator's own check, or the runtime's (a FailureReason).
    INVALID_SPEC = FailureReason.INVALID_SPEC.value

    # The runtime's failures a restart cannot fix (restart_helps is False), on Ready and
    # Degraded as the runtime named them.
    NO_KUBERNETES_MASTER = FailureReason.NO_KUBERNETES_MASTER.value
    CHECKPOINT_LOST = FailureReason.CHECKPOINT_LOST.value
    CHECKPOINT_BEHIND = FailureReason.CHECKPOINT_BEHIND.value
    CHECKPOINT_MISMATCH = FailureReason.CHECKPOINT_MISMATCH.value
    TABLE_LOST = FailureReason.TABLE_LOST.value
    TABLE_BEHIND = FailureReason.TABLE_BEHIND.value
    DEAD_LETTER_TABLE_AHEAD = FailureReason.DEAD_LETTER_TABLE_AHEAD.value
    DATA_LOSS = FailureReason.DATA_LOSS.value
    KAFKA_CLUSTER_CHANGED = FailureReason.KAFKA_CLUSTER_CHANGED.value
    TOPIC_RECREATED = FailureReason.TOPIC_RECREATED.value
    ROUTING_CHANGED = FailureReason.ROUTING_CHANGED.value
    OBJECT_STORE_ACCESS_DENIED = FailureReason.OBJECT_STORE_ACCESS_DENIED.value
    OBJECT_STORE_NO_CREDENTIALS = FailureReason.OBJECT_STORE_NO_CREDENTIALS.value
    BUCKET_NOT_FOUND = FailureReason.BUCKET_NOT_FOUND.value
    CONDITIONAL_PUT_IGNORED = FailureReason.CONDITIONAL_PUT_IGNORED.value
    # The Kafka preflight's failures (a restart with backoff helps once fixed), on Ready.
    KAFKA_CREDENTIALS_MISSING = FailureReason.KAFKA_CREDENTIALS_MISSING.value
    KAFKA_CREDENTIALS_INVALID = FailureReason.KAFKA_CREDENTIALS_INVALID.value
    KAFKA_TLS_FAILED = FailureReason.KAFKA_TLS_FAILED.value
    KAFKA_AUTHENTICATION_FAILED = FailureReason.KAFKA_AUTHENTICATION_FAILED.value
    KAFKA_AUTHORIZATION_FAILED = FailureReason.KAFKA_AUTHORIZATION_FAILED.value
    KAFKA_TOPIC_NOT_FOUND = FailureReason.KAFKA_TOPIC_NOT_FOUND.value
    # Degraded while the stream runs: its principal may not use its consumer group (its
    # offsets there serve lag tools and KEDA, not the stream).
    KAFKA_GROUP_AUTHORIZATION_FAILED = "KafkaGroupAuthorizationFailed"

    # The Scaling condition: the autoscaler policy's verdicts (its Verdict type) ...
    HOLD = "Hold"
    SCALE_UP = "ScaleUp"
    SCALE_DOWN = "ScaleDown"
    # A verdict only: the condition names the missing input instead (the three below).
    UNKNOWN = "Unknown"
    # A scale-up did not deliver the throughput it promised.
    INEFFECTIVE = "Ineffective"
    AT_MAXIMUM = "AtMaximum"
    # As many task slots as Kafka partitions already.
    PARTITION_CEILING = "PartitionCeiling"
    # The hottest partition's task runs on one core whatever the count.
    HOT_PARTITION = "HotPartition"
    # maxOffsetsPerTrigger (over the batch overhead) caps the rate.
    BATCH_CAP = "BatchCap"
    # A change waits: for its stabilization window, or to see the last scale-up deliver.
    STABILIZING = "Stabilizing"
    # spec.scaling.mode manual: the count is set by hand.
    MANUAL = "Manual"
    # ... and what stops the policy from deciding.
    KAFKA_UNREACHABLE = "KafkaUnreachable"
    # The driver reports, but a figure the policy needs (capacity, rates) is not measured yet.
    MEASURING = "Measuring"
    DRIVER_NOT_RUNNING = "DriverNotRunning"

    # The Freshness condition (spec.freshness): the measured p99 age holds the target ...
    ON_TARGET = "OnTarget"
    # ... does not (the stream is behind: the Scaling condition says what the autoscaler does) ...
    BEHIND_TARGET = "BehindTarget"
    # ... cannot, even with nothing waiting: batches take longer than the target allows.
    TARGET_UNREACHABLE = "TargetUnreachable"
    # ... or no record landed within the window to measure (Unknown).
    NO_RECENT_RECORDS = "NoRecentRecords"


class EventReason(StrEnum):
    """The reason of an Event posted on a DeltaIngestion."""

    # The first reconcile applied the children (ConfigMap, Services, ...).
    RESOURCES_CREATED = "ResourcesCreated"
    # A spec change applied in place, without a new driver.
    CONFIG_UPDATED = "ConfigUpdated"
    # A child (NetworkPolicy, CronJob, ...) edited or deleted by someone else, applied again.
    CHILD_RESTORED = "ChildRestored"
    RECONCILE_FAILED = "ReconcileFailed"
    # Another operator release serves the resource (status.operator): this one does nothing.
    OPERATOR_STANDING_BACK = "OperatorStandingBack"
    # This release took over a resource whose serving release stopped renewing its claim.
    OPERATOR_TOOK_OVER = "OperatorTookOver"
    INVALID_SPEC = FailureReason.INVALID_SPEC.value
    SUSPENDED = "Suspended"
    DRIVER_CREATED = "DriverCreated"
    # A new driver after a failure.
    DRIVER_RESTARTED = "DriverRestarted"
    DRIVER_FAILED = "DriverFailed"
    DRIVER_CRASH_LOOPING = "DriverCrashLooping"
    DRIVER_REPLACING = "DriverReplacing"
    SCALED_UP = "ScaledUp"
    SCALED_DOWN = "ScaledDown"
    # The stream moves between Spark in the driver pod alone and executor pods (a new driver).
    MOVED_TO_EXECUTORS = "MovedToExecutors"
    MOVED_TO_LOCAL_MODE = "MovedToLocalMode"
    # The stream moves into a pool (its driver gone) or out of it to a driver of its own.
    MOVED_TO_POOL = "MovedToPool"
    MOVED_TO_DRIVER = "MovedToDriver"
    # "Scaling" + a verdict that says more executors would not help (scaling.LIMIT_VERDICTS).
    SCALING_INEFFECTIVE = "ScalingIneffective"
    SCALING_HOT_PARTITION = "ScalingHotPartition"
    SCALING_BATCH_CAP = "ScalingBatchCap"
    SCALING_PARTITION_CEILING = "ScalingPartitionCeiling"
    SCALING_AT_MAXIMUM = "ScalingAtMaximum"

    # The runtime's failures a restart cannot fix, as the runtime named them.
    NO_KUBERNETES_MASTER = FailureReason.NO_KUBERNETES_MASTER.value
    CHECKPOINT_LOST = FailureReason.CHECKPOINT_LOST.value
    CHECKPOINT_BEHIND = FailureReason.CHECKPOINT_BEHIND.value
    CHECKPOINT_MISMATCH = FailureReason.CHECKPOINT_MISMATCH.value
    TABLE_LOST = FailureReason.TABLE_LOST.value
    TABLE_BEHIND = FailureReason.TABLE_BEHIND.value
    DEAD_LETTER_TABLE_AHEAD = FailureReason.DEAD_LETTER_TABLE_AHEAD.value
    DATA_LOSS = FailureReason.DATA_LOSS.value
    KAFKA_CLUSTER_CHANGED = FailureReason.KAFKA_CLUSTER_CHANGED.value
    TOPIC_RECREATED = FailureReason.TOPIC_RECREATED.value
    ROUTING_CHANGED = FailureReason.ROUTING_CHANGED.value
    OBJECT_STORE_ACCESS_DENIED = FailureReason.OBJECT_STORE_ACCESS_DENIED.value
    OBJECT_STORE_NO_CREDENTIALS = FailureReason.OBJECT_STORE_NO_CREDENTIALS.value
    BUCKET_NOT_FOUND = FailureReason.BUCKET_NOT_FOUND.value
    CONDITIONAL_PUT_IGNORED = FailureReason.CONDITIONAL_PUT_IGNORED.value
