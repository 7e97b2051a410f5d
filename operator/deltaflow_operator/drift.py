"""Children changed by someone else: what the watch on the operator's children reports, per
owner, until the owner's next apply puts them back.

A child's *version* is a digest of what an apply decides: the object without the API server's
bookkeeping (resourceVersion, managedFields, generation, ...) and without ``status``. So a
controller's status write (a CronJob's ``lastScheduleTime`` each run) is no change, and an event
of this process's own apply, however late it arrives, carries the version the apply returned.
The owners are a stream's children (the reconciler) and a pool's companions (the pool keeper).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Children are applied again at least this often even when no event said so, in case a watch
# missed one (a delete during a relist is not reported). controller-runtime's default is 10 h;
# at ten minutes the re-applies alone had been ~67 requests/min for 61 streams (FL6).
RESYNC_SECONDS = 6 * 3600.0
# Children changed by someone else are put back at once; after RESTORES_BEFORE_SPACING restores
# within RESTORE_WINDOW_SECONDS, no more often than every RESTORE_SPACING_SECONDS: another
# controller that keeps rewriting the operator's fields (a GitOps self-heal, a policy engine)
# would otherwise meet it at watch speed.
RESTORES_BEFORE_SPACING = 3
RESTORE_WINDOW_SECONDS = 300.0
RESTORE_SPACING_SECONDS = 30.0
# Written by the API server or by controllers, never by the operator's apply.
_BOOKKEEPING = frozenset(
    {"resourceVersion", "managedFields", "generation", "creationTimestamp", "uid", "selfLink"}
)


def child_key(kind: str, name: str) -> str:
    """How the operator names one object it applies among an owner's (``kind/name``)."""
    return f"{kind}/{name}"


def child_version(obj: Mapping[str, Any]) -> str:
    """The digest of what of ``obj`` an apply decides (see the module docstring)."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in _BOOKKEEPING}
    rest = {k: v for k, v in obj.items() if k not in ("metadata", "status")}
    text = json.dumps([meta, rest], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def restore_waits(restores: tuple[float, ...], now: float) -> bool:
    """Whether putting an owner's children back now must wait: ``restores`` (when it was done
    before, monotonic) holds RESTORES_BEFORE_SPACING within RESTORE_WINDOW_SECONDS, the last
    under RESTORE_SPACING_SECONDS ago."""
    recent = [t for t in restores if now - t < RESTORE_WINDOW_SECONDS]
    return len(recent) >= RESTORES_BEFORE_SPACING and now - recent[-1] < RESTORE_SPACING_SECONDS


def restored_at(restores: tuple[float, ...], now: float) -> tuple[float, ...]:
    """``restores`` with one at ``now``, those out of the window dropped."""
    return (*(t for t in restores if now - t < RESTORE_WINDOW_SECONDS), now)


@dataclass(frozen=True)
class Pending:
    """An owner's marked children when its apply began, and the mark count then (every mark
    up to ``upto`` is what that apply puts back)."""

    children: tuple[str, ...]
    upto: int


class Drift:
    """Per owner: the versions of its children as this process last applied them, and those the
    watch since saw otherwise (None: deleted). Written from kopf's event loop, read by rounds in
    worker threads: one lock around both, so an event compares with the versions it lands
    after."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._applied: dict[str, dict[str, str]] = {}
        self._marks: dict[str, dict[str, tuple[int, str | None]]] = {}  # child -> (mark, seen)
        self._count = 0

    def seen(self, owner: str, child: str, version: str | None) -> bool:
        """A watched child of ``owner`` at ``version``. Whether it differs from what this
        process applied (then it is marked: the owner should apply again now). Nothing is
        marked before the owner's first apply in this process, which is due anyway."""
        with self._lock:
            applied = self._applied.get(owner)
            if applied is None or child not in applied:
                return False
            if applied[child] == version:  # as applied (its own apply's event, or put back)
                self._marks.get(owner, {}).pop(child, None)
                return False
            self._count += 1
            self._marks.setdefault(owner, {})[child] = (self._count, version)
            return True

    def pending(self, owner: str) -> Pending:
        """The owner's marks now (take this before applying, hand it to ``applied``)."""
        with self._lock:
            return Pending(tuple(sorted(self._marks.get(owner, {}))), self._count)

    def applied(self, owner: str, before: Pending, versions: Mapping[str, str]) -> list[str]:
        """The owner's children were applied, leaving ``versions``: the marks made before the
        apply began are settled, and so are later ones at the version applied (its own
        events); an edit made during the apply stays marked. Returns the children put back."""
        with self._lock:
            self._applied[owner] = dict(versions)
            left = {
                child: (mark, seen)
                for child, (mark, seen) in self._marks.pop(owner, {}).items()
                if mark > before.upto and child in versions and versions[child] != seen
            }
            if left:
                self._marks[owner] = left
        return [child for child in before.children if child in versions]

    def forget(self, owner: str) -> None:
        """The owner is gone, or no longer this process's to apply."""
        with self._lock:
            self._applied.pop(owner, None)
            self._marks.pop(owner, None)
