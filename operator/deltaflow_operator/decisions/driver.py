"""What to do with the driver pod, given what the operator observed.

The driver pod has a fixed name, so the API server itself guarantees that two drivers never
exist at once; a replacement deletes the old pod and creates the new one only once it is gone.
A failed driver is replaced after an exponential backoff; repeated failures make the resource
Degraded with the last reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Literal

from deltaflow_api import DeltaIngestion
from deltaflow_api.failures import (
    KAFKA_FAILURES,
    FailureReason,
    Termination,
    restart_helps,
    what_to_do,
)
from deltaflow_api.reasons import ConditionType, EventReason, Reason
from deltaflow_api.v1alpha1 import Condition, DriverStatus, SecretKeyRef
from deltaflow_operator.builders.common import SPEC_HASH_ANNOTATION
from deltaflow_operator.builders.driver import secret_refs
from deltaflow_operator.decisions.conditions import set_condition
from deltaflow_operator.decisions.pod import Pod
from deltaflow_operator.settings import Settings

# A driver that has been running this long is healthy again: its failure streak is forgotten.
STABLE_RUN = timedelta(minutes=2)

# Waiting reasons of a container the kubelet cannot start until someone changes something.
IMAGE_PULL_FAILURES = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}
)
CONFIG_FAILURES = frozenset({"CreateContainerConfigError", "CreateContainerError"})

DriverAction = Literal["none", "create", "delete", "wait"]


class DeleteReason(StrEnum):
    """Why a driver pod is deleted (also the ``reason`` label of driver_actions_total)."""

    NONE = ""
    SUSPENDED = "suspended"
    FAILED = "failed"
    SPEC_CHANGED = "spec changed"  # the one a replacement follows in the same round
    RESOURCE_DELETED = "resource deleted"


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event to post on the DeltaIngestion."""

    type: Literal["Normal", "Warning"]
    reason: EventReason
    message: str


@dataclass(frozen=True)
class Observed:
    """What the operator saw this round."""

    ingestion: DeltaIngestion
    driver_pod: Pod | None
    desired_hash: str
    changed_fields: list[str]
    now: datetime


@dataclass(frozen=True)
class DriverPlan:
    """The decision: one action on the driver pod, the new status and what to tell the user."""

    action: DriverAction
    driver: DriverStatus
    conditions: list[Condition]
    events: list[Event] = field(default_factory=list)
    requeue_after: float | None = None
    delete_reason: DeleteReason = DeleteReason.NONE


def backoff_seconds(failures: int, settings: Settings) -> float:
    """Exponential backoff before restart number ``failures`` (1 -> base, 2 -> 2*base, ...)."""
    if failures <= 0:
        return 0.0
    return float(
        min(settings.backoff_max_seconds, settings.backoff_base_seconds * 2 ** (failures - 1))
    )


def kafka_failure(last_failure_reason: str | None) -> FailureReason | None:
    """The Kafka preflight failure a ``lastFailureReason`` ("<reason>: <message>") names."""
    name = (last_failure_reason or "").split(":", 1)[0]
    return next((f for f in KAFKA_FAILURES if f.value == name), None)


def pod_failure_reason(pod: Pod) -> str:
    """The most specific reason a pod gives for failing: the runtime's reason and message, the
    container's exit (OOMKilled, exit code), then the pod's status."""
    termination = pod.termination
    if termination is not None:
        return f"{termination.reason.value}: {termination.message}"
    ended = pod.terminated
    if ended is not None:
        return f"{ended.reason or 'Error'}: {ended.message or f'exit code {ended.exit_code}'}"
    reason = pod.reason or "Failed"
    return f"{reason}: {pod.message}" if pod.message else reason


@dataclass(frozen=True)
class PendingDiagnosis:
    """Why a driver pod is not running yet, and whether waiting can fix it."""

    reason: Reason
    message: str
    stuck: bool  # True: it will not start without a change (or it is past the deadline)
    # Seconds until the deadline makes it stuck (a pod event wakes the operator for the rest).
    deadline_in: float | None = None


def diagnose_pending(
    pod: Pod,
    now: datetime,
    deadline: timedelta,
    secrets: dict[str, SecretKeyRef] | None = None,
    namespace: str = "",
) -> PendingDiagnosis:
    """Why a Pending driver pod does not run: the kubelet's waiting reason (image pull, a
    missing Secret or key, named by the spec field in ``secrets`` that references it), the
    scheduler's reason, or plain waiting — stuck once past ``deadline``."""
    for container in pod.containers:
        reason, detail = container.waiting_reason, container.waiting_message
        if reason in IMAGE_PULL_FAILURES:
            image = container.image
            return PendingDiagnosis(
                Reason.IMAGE_PULL_FAILED,
                f"the driver's image {image} cannot be pulled ({reason}: {detail}); check "
                "spec.image (or the chart's image values) and imagePullSecrets",
                stuck=True,
            )
        if reason in CONFIG_FAILURES:
            return _config_failure(str(reason), detail, secrets or {}, namespace)
    # Times, not ages, in messages: a status that says the same thing stays byte-equal, so the
    # operator writes nothing while nothing changes.
    created = pod.created_at or now
    past = now - created >= deadline
    for condition in pod.conditions:
        if condition.type == "PodScheduled" and condition.status == "False":
            why = condition.message or condition.reason or "not scheduled"
            return PendingDiagnosis(
                Reason.UNSCHEDULABLE,
                f"the driver pod cannot be scheduled (created {at_text(created)}): {why}",
                stuck=past,
                deadline_in=None if past else (created + deadline - now).total_seconds(),
            )
    return PendingDiagnosis(
        Reason.DRIVER_PENDING,
        f"the driver pod is {pod.phase} since {at_text(created)}",
        stuck=past,
        deadline_in=None if past else (created + deadline - now).total_seconds(),
    )


def _config_failure(
    reason: str, detail: str, secrets: dict[str, SecretKeyRef], namespace: str
) -> PendingDiagnosis:
    """The kubelet cannot build the container: a Secret or key the spec references is missing
    (the operator reads no Secret itself; the kubelet's words name it, the spec's field too)."""

    # The kubelet says `secret "NAME" not found` or `couldn't find key KEY in Secret NS/NAME`.
    def named_by_kubelet(ref: SecretKeyRef) -> bool:
        in_ns = rf"Secret {re.escape(namespace)}/{re.escape(ref.name)}(\s|$)"
        return f'secret "{ref.name}"' in detail or re.search(in_ns, detail) is not None

    named = {field: ref for field, ref in secrets.items() if named_by_kubelet(ref)}
    if named:
        missing_key = {
            f: r for f, r in named.items() if re.search(rf"key {re.escape(r.key)} in ", detail)
        }
        fields = missing_key or named
        names = ", ".join(
            f"{field} (Secret {namespace}/{ref.name}, key {ref.key})"
            for field, ref in sorted(fields.items())
        )
        return PendingDiagnosis(
            Reason.SECRET_MISSING,
            f"the driver cannot start: {names} does not exist ({detail}); create it (or fix "
            "the field) and the driver starts by itself",
            stuck=True,
        )
    return PendingDiagnosis(
        Reason.CONTAINER_CONFIG_ERROR,
        f"the kubelet cannot start the driver ({reason}: {detail}); a Secret or key the "
        "spec references is the usual cause: create it and the driver starts",
        stuck=True,
    )


def at_text(when: datetime) -> str:
    """A time for a condition message, to the second, in UTC."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class _Conditions:
    """The conditions being decided this round, with the resource's generation and the time."""

    def __init__(self, existing: list[Condition], generation: int | None, now: datetime) -> None:
        self.items, self.generation, self.now = list(existing), generation, now

    def set(self, type_: ConditionType, value: bool, reason: Reason, message: str = "") -> None:
        self.items = set_condition(
            self.items, type_, value, reason, message, self.generation, self.now
        )

    def degraded(self, reason_text: str) -> None:
        crash = bool(reason_text)
        self.set(
            ConditionType.DEGRADED,
            crash,
            Reason.DRIVER_CRASH_LOOPING if crash else Reason.HEALTHY,
            reason_text,
        )


def decide_driver(observed: Observed, settings: Settings) -> DriverPlan:
    """Plan the driver's next step and the Ready/Progressing/Degraded/Suspended conditions."""
    ingestion, pod = observed.ingestion, observed.driver_pod
    status = ingestion.status
    previous = status.driver if status is not None else DriverStatus()
    conds = _Conditions(
        status.conditions if status is not None else [],
        ingestion.metadata.get("generation"),
        observed.now,
    )
    phase = pod.phase if pod else None
    name = pod.name if pod else None
    driver = previous.model_copy(update={"pod_name": name, "phase": phase})
    deleting = bool(pod and pod.deleting)

    if ingestion.spec.suspend:
        return _suspended(driver, conds, pod is not None, deleting)
    conds.set(ConditionType.SUSPENDED, False, Reason.RUNNING)
    if pod is None:
        return _start(driver, conds, observed.now, settings)
    if deleting:
        return _stopping(driver, conds, pod, observed.now, settings)
    current_hash = pod.annotations.get(SPEC_HASH_ANNOTATION)
    if phase in ("Failed", "Succeeded"):
        termination = pod.termination
        if (
            termination is not None
            and not restart_helps(termination.reason)
            and current_hash == observed.desired_hash
        ):
            return _needs_action(driver, conds, pod, termination, ingestion.namespace)
        if current_hash != observed.desired_hash:
            return _replace(driver, conds, observed.changed_fields, settings)
        return _failed(driver, conds, pod, observed.now, settings)
    if current_hash != observed.desired_hash:
        return _replace(driver, conds, observed.changed_fields, settings)
    return _running_or_pending(
        driver,
        conds,
        pod,
        phase=str(phase),
        now=observed.now,
        settings=settings,
        secrets=secret_refs(ingestion),
        namespace=ingestion.namespace,
    )


def _stopping(
    driver: DriverStatus,
    conds: _Conditions,
    pod: Pod,
    now: datetime,
    settings: Settings,
) -> DriverPlan:
    # deletionTimestamp is when the grace period ends: past it by the deadline, the kubelet is
    # not finishing the deletion (node down or unreachable) and no new driver can start.
    since = pod.deletion_at or now
    overdue = now - since
    if overdue >= timedelta(seconds=settings.driver_pending_deadline_seconds):
        message = (
            f"the previous driver pod {pod.name} should have been gone at "
            f"{at_text(since)}: its node may be down. If the node is gone for "
            f"good: kubectl delete pod {pod.name} -n {pod.namespace} --force"
        )
        conds.set(ConditionType.READY, False, Reason.DRIVER_STUCK_TERMINATING, message)
        conds.set(ConditionType.PROGRESSING, True, Reason.DRIVER_STOPPING, message)
        conds.set(ConditionType.DEGRADED, True, Reason.DRIVER_STUCK_TERMINATING, message)
        return DriverPlan("wait", driver, conds.items, requeue_after=5.0)
    waiting = "waiting for the previous driver to terminate"
    conds.set(ConditionType.READY, False, Reason.DRIVER_STOPPING, waiting)
    conds.set(ConditionType.PROGRESSING, True, Reason.DRIVER_STOPPING, waiting)
    conds.degraded(_crash_loop_message(driver, settings))
    return DriverPlan("wait", driver, conds.items, requeue_after=1.0)


def _crash_loop_message(driver: DriverStatus, settings: Settings) -> str:
    if driver.consecutive_failures < settings.degraded_after_failures:
        return ""
    return (
        f"the driver failed {driver.consecutive_failures} times in a row; "
        f"last: {driver.last_failure_reason}"
    )


def _suspended(
    driver: DriverStatus, conds: _Conditions, has_pod: bool, deleting: bool
) -> DriverPlan:
    conds.set(
        ConditionType.SUSPENDED,
        True,
        Reason.SUSPENDED,
        "spec.suspend is true: the driver is stopped; the "
        "checkpoint keeps the stream's position for when it resumes",
    )
    conds.set(ConditionType.READY, False, Reason.SUSPENDED, "the stream is suspended")
    conds.set(ConditionType.PROGRESSING, False, Reason.SUSPENDED, "nothing to do while suspended")
    conds.set(ConditionType.DEGRADED, False, Reason.SUSPENDED)
    driver = driver.model_copy(update={"consecutive_failures": 0, "next_start_after": None})
    if has_pod and not deleting:
        event = Event("Normal", EventReason.SUSPENDED, "spec.suspend set: stopping the driver")
        return DriverPlan(
            "delete", driver, conds.items, [event], delete_reason=DeleteReason.SUSPENDED
        )
    return DriverPlan(
        "wait" if deleting else "none", driver, conds.items, requeue_after=1.0 if deleting else None
    )


def _start(
    driver: DriverStatus, conds: _Conditions, now: datetime, settings: Settings
) -> DriverPlan:
    conds.degraded(_crash_loop_message(driver, settings))
    wait_until = driver.next_start_after
    if wait_until is not None and now < wait_until:
        seconds = (wait_until - now).total_seconds()
        waiting = f"restarting the driver at {at_text(wait_until)}"
        # A Kafka preflight's failure stays Ready's reason until the next driver starts: it
        # says what to fix, which "waiting" does not.
        kafka = kafka_failure(driver.last_failure_reason)
        if kafka is not None:
            message = f"{driver.last_failure_reason}; {waiting}"
            conds.set(ConditionType.READY, False, Reason(kafka.value), message)
        else:
            conds.set(ConditionType.READY, False, Reason.BACKOFF_WAITING, waiting)
        conds.set(ConditionType.PROGRESSING, True, Reason.BACKOFF_WAITING, waiting)
        return DriverPlan("wait", driver, conds.items, requeue_after=seconds)
    driver = driver.model_copy(update={"next_start_after": None})
    attempt = driver.consecutive_failures + 1
    restart = driver.consecutive_failures > 0
    what = f"starting the driver (attempt {attempt})" if restart else "starting the driver"
    conds.set(ConditionType.READY, False, Reason.DRIVER_STARTING, what)
    conds.set(ConditionType.PROGRESSING, True, Reason.DRIVER_STARTING, what)
    event = Event(
        "Normal", EventReason.DRIVER_RESTARTED if restart else EventReason.DRIVER_CREATED, what
    )
    return DriverPlan("create", driver, conds.items, [event], requeue_after=1.0)


def _failed(
    driver: DriverStatus, conds: _Conditions, pod: Pod, now: datetime, settings: Settings
) -> DriverPlan:
    # A streaming driver never ends on its own: exiting at all, even with 0, is a failure.
    failed = pod.phase == "Failed"
    reason = pod_failure_reason(pod) if failed else "the driver exited, but a stream never ends"
    failures = driver.consecutive_failures + 1
    delay = backoff_seconds(failures, settings)
    driver = driver.model_copy(
        update={
            "consecutive_failures": failures,
            "restarts": driver.restarts + 1,
            "last_failure_reason": reason,
            "next_start_after": now + timedelta(seconds=delay),
        }
    )
    events = [
        Event(
            "Warning",
            EventReason.DRIVER_FAILED,
            f"driver failed ({reason}); restart {failures} in {delay:.0f}s",
        )
    ]
    crash_loop = _crash_loop_message(driver, settings)
    if crash_loop:
        events.append(Event("Warning", EventReason.DRIVER_CRASH_LOOPING, crash_loop))
    # A Kafka preflight failure is named as such on Ready (its message says what to fix).
    termination = pod.termination
    named = termination is not None and termination.reason in KAFKA_FAILURES
    ready_reason = Reason(termination.reason.value) if named and termination else None
    conds.set(ConditionType.READY, False, ready_reason or Reason.DRIVER_FAILED, reason)
    conds.set(
        ConditionType.PROGRESSING,
        True,
        Reason.BACKOFF_WAITING,
        f"restarting the driver at {at_text(now + timedelta(seconds=delay))}",
    )
    conds.degraded(crash_loop)
    return DriverPlan(
        "delete",
        driver,
        conds.items,
        events,
        requeue_after=delay,
        delete_reason=DeleteReason.FAILED,
    )


def _needs_action(
    driver: DriverStatus,
    conds: _Conditions,
    pod: Pod,
    termination: Termination,
    namespace: str,
) -> DriverPlan:
    """A failure a restart cannot fix: keep the failed pod (its logs) and say what to do."""
    pod_name = pod.name
    reason = termination.reason.value
    message = (
        f"{termination.message} To do: {what_to_do(termination.reason)}; then change the spec, "
        f"or retry with: kubectl delete pod {pod_name} -n {namespace}. Not restarted until then."
    )
    seen_before = driver.last_failure_reason == f"{reason}: {termination.message}"
    driver = driver.model_copy(
        update={
            "last_failure_reason": f"{reason}: {termination.message}",
            "next_start_after": None,
        }
    )
    # The runtime's reason, as it named it: both vocabularies hold every failure a restart
    # cannot fix (tests/unit/test_reasons.py checks it).
    conds.set(ConditionType.READY, False, Reason(reason), message)
    why = "a restart cannot fix this: " + reason
    conds.set(ConditionType.PROGRESSING, False, Reason.NEEDS_ACTION, why)
    conds.set(ConditionType.DEGRADED, True, Reason(reason), message)
    events = [] if seen_before else [Event("Warning", EventReason(reason), message)]
    return DriverPlan("none", driver, conds.items, events)


def _replace(
    driver: DriverStatus, conds: _Conditions, changed: list[str], settings: Settings
) -> DriverPlan:
    message = f"replacing the driver: {', '.join(changed) or 'its spec'} changed"
    conds.set(ConditionType.READY, False, Reason.DRIVER_REPLACING, message)
    conds.set(ConditionType.PROGRESSING, True, Reason.DRIVER_REPLACING, message)
    conds.degraded(_crash_loop_message(driver, settings))
    event = Event("Normal", EventReason.DRIVER_REPLACING, message)
    return DriverPlan(
        "delete",
        driver,
        conds.items,
        [event],
        requeue_after=1.0,
        delete_reason=DeleteReason.SPEC_CHANGED,
    )


def _running_or_pending(
    driver: DriverStatus,
    conds: _Conditions,
    pod: Pod,
    *,
    phase: str,
    now: datetime,
    settings: Settings,
    secrets: dict[str, SecretKeyRef],
    namespace: str,
) -> DriverPlan:
    if phase != "Running":
        deadline = timedelta(seconds=settings.driver_pending_deadline_seconds)
        pending = diagnose_pending(pod, now, deadline, secrets, namespace)
        conds.set(ConditionType.READY, False, pending.reason, pending.message)
        conds.set(ConditionType.PROGRESSING, not pending.stuck, pending.reason, pending.message)
        if pending.stuck:
            conds.set(ConditionType.DEGRADED, True, pending.reason, pending.message)
        else:
            conds.degraded(_crash_loop_message(driver, settings))
        # The deadline is the one change no pod event announces: look again right then.
        return DriverPlan("none", driver, conds.items, requeue_after=pending.deadline_in)
    since = pod.running_since
    if since is not None and now - since >= STABLE_RUN and driver.consecutive_failures:
        driver = driver.model_copy(update={"consecutive_failures": 0, "last_failure_reason": None})
    crash_loop = _crash_loop_message(driver, settings)
    conds.set(
        ConditionType.READY,
        not crash_loop,
        Reason.DRIVER_CRASH_LOOPING if crash_loop else Reason.STREAMING,
        crash_loop or "the driver is running",
    )
    conds.set(ConditionType.PROGRESSING, False, Reason.STREAMING, "the driver is running")
    conds.degraded(crash_loop)
    return DriverPlan("none", driver, conds.items)
