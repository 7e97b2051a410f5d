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
from typing import Any

# Children are applied again at least this often even when no event said so, in case a watch
# missed one (a delete during a relist is not reported). controller-runtime's default is 10 h;
# at ten minutes the re-applies alone had been ~67 requests/min for 61 streams (FL6).
RESYNC_SECONDS = 6 * 3600.0
# Written by the API server or by controllers, never by the operator's apply.
_BOOKKEEPING = frozenset(
    {"resourceVersion", "managedFields", "generation", "creationTimestamp", "uid", "selfLink"}
)
_UNSEEN = object()


def child_key(kind: str, name: str) -> str:
    """How the operator names one object it applies among an owner's (``kind/name``)."""
    return f"{kind}/{name}"


def child_version(obj: Mapping[str, Any]) -> str:
    """The digest of what of ``obj`` an apply decides (see the module docstring)."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in _BOOKKEEPING}
    rest = {k: v for k, v in obj.items() if k not in ("metadata", "status")}
    text = json.dumps([meta, rest], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Drift:
    """Per owner: its children the watch saw at a version other than this process applied
    (None: deleted). Written from kopf's event loop, read by the rounds in worker threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._marks: dict[str, dict[str, str | None]] = {}

    def seen(
        self, owner: str, child: str, version: str | None, applied: Mapping[str, str] | None
    ) -> bool:
        """A watched child of ``owner`` at ``version``; ``applied``: the versions this
        process's last apply of the owner's children left (None: none yet, and its first apply
        is due anyway). Whether the child differs from what was applied: then it is marked, and
        the owner should apply again now."""
        if applied is None or child not in applied or applied[child] == version:
            return False
        with self._lock:
            self._marks.setdefault(owner, {})[child] = version
        return True

    def pending(self, owner: str) -> dict[str, str | None]:
        """The owner's marked children (take this before applying, hand it to ``applied``)."""
        with self._lock:
            return dict(self._marks.get(owner, {}))

    def applied(
        self, owner: str, handled: Mapping[str, str | None], versions: Mapping[str, str]
    ) -> list[str]:
        """The owner's children were applied, leaving ``versions``: forget the marks
        ``handled`` held (what ``pending`` returned before the apply) and those of children at
        the version applied or not applied at all; keep an edit made during the apply. Returns
        the children put back (``handled`` among what was applied)."""
        with self._lock:
            marks = self._marks.pop(owner, {})
            left = {
                child: version
                for child, version in marks.items()
                if handled.get(child, _UNSEEN) != version
                and child in versions
                and versions[child] != version
            }
            if left:
                self._marks[owner] = left
        return sorted(child for child in handled if child in versions)

    def forget(self, owner: str) -> None:
        with self._lock:
            self._marks.pop(owner, None)
