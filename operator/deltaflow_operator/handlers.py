"""kopf handlers: thin triggers for :class:`~deltaflow_operator.reconcile.Reconciler`.

Each DeltaIngestion has a daemon that reconciles it, then waits for what the reconcile asked
(``requeue_after``: 1 s while a driver is replaced) or the reconcile interval, whichever is
shorter, or until something wakes it: a change of the resource, or a change of its driver pod
(a driver that crashed is seen in a second, not at the next poll). Create, update and resume
run the same idempotent reconciliation; a per-resource lock keeps one at a time.

State lives in kopf's memo (one :class:`Loop` per operator), not in module globals.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf

from deltaflow_api import GROUP, PLURAL, VERSION
from deltaflow_operator import metrics
from deltaflow_operator.builders.common import MANAGED_BY
from deltaflow_operator.decisions.pod import Pod
from deltaflow_operator.kube import Kube
from deltaflow_operator.reconcile import UNSEEN, Reconciler
from deltaflow_operator.settings import Settings

FINALIZER = f"{GROUP}/finalizer"
# No reconcile takes this long (API calls time out well before): one that does is hung.
HUNG_RECONCILE = 300.0
# An event loop that has not run for this long is wedged (see Loop.wedged).
LOOP_SILENT = 60.0
log = logging.getLogger(__name__)


@dataclass
class Loop:
    """The operator's reconcile loop state: one reconciler, a lock and a wake-up per resource."""

    reconciler: Reconciler
    interval: float
    locks: defaultdict[str, threading.Lock] = field(
        default_factory=lambda: defaultdict(threading.Lock)
    )
    # Set from the event loop (pod events), awaited by the daemons: asyncio, not threading.
    wakes: defaultdict[str, asyncio.Event] = field(
        default_factory=lambda: defaultdict(asyncio.Event)
    )
    managed: set[str] = field(default_factory=set)
    # For the liveness probe: the event loop's last heartbeat, when each reconcile started.
    last_beat: float | None = None
    heartbeat: asyncio.Task[None] | None = None  # held so the task is not garbage-collected
    running: dict[str, float] = field(default_factory=dict)
    # Each resource's driver pod as the pod watch last delivered it (None: deleted). Set from
    # the event loop, read by reconciles: the watch replaces a GET per round.
    driver_pods: dict[str, Pod | None] = field(default_factory=dict)

    def reconcile(self, namespace: str, name: str) -> float | None:
        """One reconciliation of one resource; seconds until it wants another look."""
        key = f"{namespace}/{name}"
        with self.locks[key]:
            self.running[key] = time.monotonic()
            try:
                requeue = self.reconciler.reconcile(
                    namespace, name, watched_pod=self.driver_pods.get(key, UNSEEN)
                )
            finally:
                self.running.pop(key, None)
        if self.reconciler.serves(namespace, name):
            self.managed.add(key)
        else:
            self.managed.discard(key)
        metrics.MANAGED_RESOURCES.labels("DeltaIngestion").set(len(self.managed))
        return requeue

    def wedged(self, silent_after: float = LOOP_SILENT) -> str | None:
        """What makes this operator useless while its process still answers: kopf's event loop
        silent (no heartbeat) for ``silent_after`` s, or a reconcile running past
        HUNG_RECONCILE. Generous on purpose: a busy 2-core node delays the loop by seconds, and a
        liveness restart of a leader that is merely slow costs a handover."""
        now = time.monotonic()
        for key, started in list(self.running.items()):
            if now - started > HUNG_RECONCILE:
                return f"the reconcile of {key} has run for {now - started:.0f}s"
        if self.last_beat is not None and now - self.last_beat > silent_after:
            return f"kopf's event loop has not run for {now - self.last_beat:.0f}s"
        return None

    async def beat(self, period: float = 5.0) -> None:
        """The event loop's heartbeat (a task in kopf's loop, for as long as it runs)."""
        while True:
            self.last_beat = time.monotonic()
            await asyncio.sleep(period)

    def wake(self, namespace: str, name: str) -> None:
        """Make the resource's daemon reconcile now (call from the event loop)."""
        event = self.wakes.get(f"{namespace}/{name}")  # no daemon, nothing to wake
        if event is not None:
            event.set()

    def forget(self, namespace: str, name: str) -> None:
        """The resource is gone: drop its lock, wake-up and gauge entry."""
        key = f"{namespace}/{name}"
        self.locks.pop(key, None)
        self.wakes.pop(key, None)
        self.driver_pods.pop(key, None)
        self.managed.discard(key)
        metrics.MANAGED_RESOURCES.labels("DeltaIngestion").set(len(self.managed))


def new_loop(settings: Settings, kube: Kube) -> Loop:
    """The memo entry handlers read (``kopf.run(memo=kopf.Memo(loop=new_loop(...)))``)."""
    return Loop(Reconciler(kube, settings), settings.reconcile_interval_seconds)


def install(stop_flag: threading.Event | None = None) -> None:
    """Register the handlers with kopf's default registry.

    ``stop_flag`` is the flag kopf.run watches: it is raised when kopf stops for a signal.
    """

    @kopf.on.cleanup()
    def release_stop_flag(**_: Any) -> None:
        # kopf waits on a threading.Event stop flag in an executor thread, and asyncio joins
        # that thread on exit: on SIGTERM nothing else sets the flag, so the process would hang
        # until the kubelet's SIGKILL (measured: the standby took over 47 s after a pod delete).
        if stop_flag is not None:
            stop_flag.set()

    @kopf.on.startup()
    async def start_heartbeat(memo: kopf.Memo, **_: Any) -> None:
        memo.loop.heartbeat = asyncio.get_running_loop().create_task(memo.loop.beat())

    @kopf.on.startup()
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        # Our own Lease elects the leader; kopf's peering would need its own CRDs.
        settings.peering.standalone = True
        # No watch on CustomResourceDefinitions (a cluster-wide read): the chart installs the
        # CRD before the operator starts, and discovery finds it then.
        settings.scanning.disabled = True
        settings.persistence.finalizer = FINALIZER
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix=GROUP, key="last-handled-configuration"
        )
        settings.posting.level = logging.WARNING  # our Events are posted explicitly, with causes
        settings.watching.server_timeout = 60

    kopf.on.resume(GROUP, VERSION, PLURAL)(_on_change)
    kopf.on.create(GROUP, VERSION, PLURAL)(_on_change)
    kopf.on.update(GROUP, VERSION, PLURAL)(_on_change)
    kopf.daemon(GROUP, VERSION, PLURAL, cancellation_timeout=10)(_stream_daemon)
    kopf.on.delete(GROUP, VERSION, PLURAL)(_on_delete)
    # Driver pods only: a crash or a phase change is acted on at once. Executor pods change
    # during every scaling action; the autoscaler reads them through the driver's report at
    # its own pace (waking it for each would add decisions, not information).
    drivers = {"app.kubernetes.io/managed-by": MANAGED_BY, "app.kubernetes.io/component": "driver"}
    kopf.on.event("", "v1", "pods", labels=drivers)(_on_pod_event)


def _on_change(namespace: str | None, name: str, memo: kopf.Memo, **_: Any) -> None:
    memo.loop.reconcile(str(namespace), name)


async def _stream_daemon(
    namespace: str | None, name: str, stopped: kopf.DaemonStopped, memo: kopf.Memo, **_: Any
) -> None:
    # Async, so that a daemon per resource holds no thread while it waits; the reconcile itself
    # (blocking API calls) runs in the loop's thread pool.
    loop: Loop = memo.loop
    ns = str(namespace)
    wake = loop.wakes[f"{ns}/{name}"]
    running = asyncio.get_running_loop()
    while not stopped:
        wake.clear()
        try:
            requeue = await running.run_in_executor(None, loop.reconcile, ns, name)
        except Exception:  # reported in the status by the reconciler; try again later
            log.exception("reconciling %s/%s failed", ns, name)
            requeue = None
        delay = loop.interval if requeue is None else min(requeue, loop.interval)
        deadline = time.monotonic() + delay
        # Wake early for a change; check the stop flag at least twice a second.
        while not stopped and not wake.is_set() and (left := deadline - time.monotonic()) > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), timeout=min(left, 0.5))


async def _on_pod_event(
    namespace: str | None,
    labels: Mapping[str, str],
    event: Mapping[str, Any],
    body: kopf.Body,
    memo: kopf.Memo,
    **_: Any,
) -> None:
    instance = labels.get("app.kubernetes.io/instance")
    if instance:
        loop: Loop = memo.loop
        key = f"{namespace}/{instance}"
        gone = event.get("type") == "DELETED"
        loop.driver_pods[key] = None if gone else Pod.of(body)
        loop.wake(str(namespace), instance)


def _on_delete(namespace: str | None, name: str, memo: kopf.Memo, **_: Any) -> None:
    loop: Loop = memo.loop
    with loop.locks[f"{namespace}/{name}"]:
        loop.reconciler.finalize(str(namespace), name)
    loop.forget(str(namespace), name)
