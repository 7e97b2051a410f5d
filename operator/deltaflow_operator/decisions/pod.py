"""A typed view of the pod fields the operator reads (kopf's ``structs/bodies.py`` does the same
for resource bodies). Built once where a pod enters the operator (the pod watch, a GET), so no
decision walks ``(pod.get("status") or {})`` chains or guesses which key may be missing."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from deltaflow_api.failures import Termination


def _time(value: Any) -> datetime | None:
    if not value:
        return None
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value))


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


@dataclass(frozen=True)
class Terminated:
    """How a container ended: its reason (OOMKilled, Error, Completed), termination message
    and exit code."""

    reason: str | None
    message: str | None
    exit_code: int | None


@dataclass(frozen=True)
class Container:
    """One container's status."""

    image: str = ""
    running_since: datetime | None = None
    waiting_reason: str | None = None
    waiting_message: str = ""
    terminated: Terminated | None = None

    @classmethod
    def of(cls, status: Mapping[str, Any]) -> Container:
        state = _map(status.get("state"))
        waiting, ended = _map(state.get("waiting")), _map(state.get("terminated"))
        return cls(
            image=str(status.get("image") or ""),
            running_since=_time(_map(state.get("running")).get("startedAt")),
            waiting_reason=waiting.get("reason"),
            waiting_message=str(waiting.get("message") or ""),
            terminated=Terminated(ended.get("reason"), ended.get("message"), ended.get("exitCode"))
            if ended
            else None,
        )


@dataclass(frozen=True)
class PodCondition:
    """One of ``status.conditions`` (PodScheduled, Ready, ...)."""

    type: str
    status: str
    reason: str | None = None
    message: str | None = None


@dataclass(frozen=True)
class Pod:
    """A pod as the operator reads it. ``phase`` is Pending when the API has not said yet."""

    name: str
    namespace: str
    uid: str | None = None
    phase: str = "Pending"
    created_at: datetime | None = None
    # deletionTimestamp: when the grace period ends; set once the pod is being deleted.
    deletion_at: datetime | None = None
    annotations: Mapping[str, str] = field(default_factory=dict)
    reason: str | None = None  # the pod's status reason and message (eviction, ...)
    message: str | None = None
    containers: tuple[Container, ...] = ()
    conditions: tuple[PodCondition, ...] = ()

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> Pod:
        """The view of a pod as the API (or kopf) delivers it."""
        meta, status = _map(body.get("metadata")), _map(body.get("status"))
        return cls(
            name=str(meta.get("name") or ""),
            namespace=str(meta.get("namespace") or ""),
            uid=meta.get("uid"),
            phase=str(status.get("phase") or "Pending"),
            created_at=_time(meta.get("creationTimestamp")),
            deletion_at=_time(meta.get("deletionTimestamp")),
            annotations={str(k): str(v) for k, v in _map(meta.get("annotations")).items()},
            reason=status.get("reason"),
            message=status.get("message"),
            containers=tuple(Container.of(_map(c)) for c in status.get("containerStatuses") or []),
            conditions=tuple(
                PodCondition(
                    str(c.get("type")), str(c.get("status")), c.get("reason"), c.get("message")
                )
                for c in map(_map, status.get("conditions") or [])
            ),
        )

    @property
    def deleting(self) -> bool:
        return self.deletion_at is not None

    @property
    def running(self) -> bool:
        """Running and not being deleted."""
        return self.phase == "Running" and not self.deleting

    @property
    def running_since(self) -> datetime | None:
        """When its container started running (None: it does not run)."""
        return next((c.running_since for c in self.containers if c.running_since), None)

    @property
    def terminated(self) -> Terminated | None:
        """How its (first ended) container ended, if one did."""
        return next((c.terminated for c in self.containers if c.terminated), None)

    @property
    def termination(self) -> Termination | None:
        """The runtime's own termination message (reason and message), if it wrote one."""
        ended = self.terminated
        return None if ended is None else Termination.parse(ended.message)
