"""Why a Deltaflow process failed: one vocabulary for the runtime, which ends with a reason in its
termination message, and the operator, which decides from it whether a restart can help.

A restart helps with what may pass on its own (a store that did not answer, an executor lost, a
batch that saw a topic change under it). It cannot help with what someone has to fix (the spec, a
checkpoint that does not belong with its table, records Kafka deleted): restarting those only
fills the logs, so the operator keeps the failed driver (its logs stay readable) until the spec
changes or someone deletes the pod to retry.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum


class FailureReason(StrEnum):
    """The reason a runtime process (driver or maintenance job) ended with."""

    INVALID_SPEC = "InvalidSpec"
    NO_KUBERNETES_MASTER = "NoKubernetesMaster"
    # The start-up guard: the checkpoint and the tables disagree.
    CHECKPOINT_LOST = "CheckpointLost"
    CHECKPOINT_BEHIND = "CheckpointBehind"
    CHECKPOINT_MISMATCH = "CheckpointMismatch"
    TABLE_LOST = "TableLost"
    TABLE_BEHIND = "TableBehind"
    DEAD_LETTER_TABLE_AHEAD = "DeadLetterTableAhead"
    # While streaming.
    DATA_LOSS = "DataLoss"
    # Kafka is not the one the stream read: another cluster, or the topic deleted and created
    # again (its offsets point into a log that is gone).
    KAFKA_CLUSTER_CHANGED = "KafkaClusterChanged"
    TOPIC_RECREATED = "TopicRecreated"
    ROUTING_CHANGED = "RoutingChanged"
    BATCH_MISMATCH = "BatchMismatch"
    DUPLICATE_WRITER = "DuplicateWriter"
    # The object store, probed at start.
    OBJECT_STORE_ACCESS_DENIED = "ObjectStoreAccessDenied"
    OBJECT_STORE_NO_CREDENTIALS = "ObjectStoreNoCredentials"
    BUCKET_NOT_FOUND = "BucketNotFound"
    OBJECT_STORE_UNREACHABLE = "ObjectStoreUnreachable"
    OBJECT_STORE_ERROR = "ObjectStoreError"
    # A Secret key spec.source.auth references is not mounted (the Secret or its key is
    # missing): a driver started after it is created mounts it.
    KAFKA_CREDENTIALS_MISSING = "KafkaCredentialsMissing"
    # The Kafka preflight at a driver's start (deltaflow_runtime.kafka_preflight): each names
    # the spec field or Secret key to fix; a driver started after the fix goes on by itself.
    KAFKA_CREDENTIALS_INVALID = "KafkaCredentialsInvalid"
    KAFKA_UNREACHABLE = "KafkaUnreachable"
    KAFKA_TLS_FAILED = "KafkaTLSFailed"
    KAFKA_AUTHENTICATION_FAILED = "KafkaAuthenticationFailed"
    KAFKA_AUTHORIZATION_FAILED = "KafkaAuthorizationFailed"
    KAFKA_TOPIC_NOT_FOUND = "KafkaTopicNotFound"
    # The store ignores If-None-Match: two writers could replace each other's commits.
    CONDITIONAL_PUT_IGNORED = "ConditionalPutIgnored"
    # Maintenance and recover-checkpoint jobs.
    VACUUM_REFUSED = "VacuumRefused"
    NOTHING_TO_RECOVER = "NothingToRecover"
    TABLE_RESTORED = "TableRestored"
    OFFSETS_NOT_RECORDED = "OffsetsNotRecorded"
    CHECKPOINT_EXISTS = "CheckpointExists"
    # Anything else (an exception nobody classified): a restart may help.
    FAILED = "Failed"


# Reasons only a command ends with (a maintenance job, `deltaflow recover-checkpoint`), never a
# driver: a job's failure is its CronJob's to retry, a command's is its user's to read.
COMMAND_FAILURES = frozenset(
    {
        FailureReason.VACUUM_REFUSED,
        FailureReason.NOTHING_TO_RECOVER,
        FailureReason.TABLE_RESTORED,
        FailureReason.OFFSETS_NOT_RECORDED,
        FailureReason.CHECKPOINT_EXISTS,
    }
)

# What a restart cannot fix, and what to do instead.
_NEEDS_ACTION: dict[FailureReason, str] = {
    FailureReason.INVALID_SPEC: "fix the spec",
    FailureReason.NO_KUBERNETES_MASTER: "the driver pod cannot reach the API server: check the "
    "pod's environment (KUBERNETES_SERVICE_HOST/PORT)",
    FailureReason.CHECKPOINT_LOST: "follow the recovery steps in the message",
    FailureReason.CHECKPOINT_BEHIND: "follow the recovery steps in the message",
    FailureReason.CHECKPOINT_MISMATCH: "follow the recovery steps in the message",
    FailureReason.TABLE_LOST: "follow the recovery steps in the message",
    FailureReason.TABLE_BEHIND: "follow the recovery steps in the message",
    FailureReason.DEAD_LETTER_TABLE_AHEAD: "follow the recovery steps in the message",
    FailureReason.DATA_LOSS: "decide about the lost records (the message names them); "
    "spec.source.failOnDataLoss: false accepts the loss",
    FailureReason.KAFKA_CLUSTER_CHANGED: "point spec.source.bootstrapServers back at the "
    "cluster the stream read, or start a new DeltaIngestion for the new cluster",
    FailureReason.TOPIC_RECREATED: "start a new DeltaIngestion (a new name) to read the new "
    "topic; the message says how",
    FailureReason.ROUTING_CHANGED: "run the previous spec until its last batch commits, then "
    "apply the change",
    FailureReason.OBJECT_STORE_ACCESS_DENIED: "fix the credentials or the bucket policy",
    FailureReason.OBJECT_STORE_NO_CREDENTIALS: "give the stream credentials",
    FailureReason.BUCKET_NOT_FOUND: "create the bucket or fix the path",
    FailureReason.CONDITIONAL_PUT_IGNORED: "use an object store that honours If-None-Match on PUT",
}


# Failures a Kafka preflight names: a restart (with backoff) helps once the Secret, ACL, topic
# or broker is fixed, and the Ready condition carries the reason itself.
KAFKA_FAILURES = frozenset(
    {
        FailureReason.KAFKA_CREDENTIALS_MISSING,
        FailureReason.KAFKA_CREDENTIALS_INVALID,
        FailureReason.KAFKA_UNREACHABLE,
        FailureReason.KAFKA_TLS_FAILED,
        FailureReason.KAFKA_AUTHENTICATION_FAILED,
        FailureReason.KAFKA_AUTHORIZATION_FAILED,
        FailureReason.KAFKA_TOPIC_NOT_FOUND,
    }
)


def restart_helps(reason: FailureReason) -> bool:
    """Whether restarting the driver (with backoff) can get past this failure by itself."""
    return reason not in _NEEDS_ACTION


def what_to_do(reason: FailureReason) -> str:
    """For a failure a restart cannot fix: what the user has to do."""
    return _NEEDS_ACTION.get(reason, "")


@dataclass(frozen=True)
class Termination:
    """A runtime's termination message: its reason and what it said."""

    reason: FailureReason
    message: str

    def render(self) -> str:
        """The termination message as the runtime writes it (JSON, one line)."""
        return json.dumps({"reason": self.reason.value, "message": self.message})

    @classmethod
    def parse(cls, text: str | None) -> Termination | None:
        """The runtime's termination message, or None if ``text`` is not one (e.g. the JVM's
        own last words after an OOM kill); an unknown reason reads as ``Failed``."""
        try:
            body = json.loads(text or "")
        except ValueError:
            return None
        if not isinstance(body, dict) or "reason" not in body:
            return None
        try:
            reason = FailureReason(str(body["reason"]))
        except ValueError:
            reason = FailureReason.FAILED
        return cls(reason, str(body.get("message") or ""))
