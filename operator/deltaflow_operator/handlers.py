"""kopf handlers: thin triggers for :class:`~deltaflow_operator.reconcile.Reconciler`.

Each DeltaIngestion has a daemon, the one place that reconciles it: it reconciles, then waits
for what the reconcile asked (``requeue_after``: 1 s while a driver is replaced) or the
reconcile interval, whichever is shorter, or until something wakes it: a change of the
resource's spec (kopf's update handler), a change of its driver pod (a driver that crashed
is seen in a second, not at the next poll), or an edit or delete of one of its children by
someone else (put back at once, with no periodic re-apply of every child). The driver pods
come from a kopf index over the pod watch, read by the daemon before each round, and the
resource from kopf's body (current with the watch; the reconciler reads the API server when it
is not provably so): no GET per round.

State lives in kopf's memo (one :class:`Loop` per operator), not in module globals.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf

from deltaflow_api import GROUP, KIND, PLURAL, VERSION
from deltaflow_operator import metrics
from deltaflow_operator.builders.common import MANAGED_BY
from deltaflow_operator.builders.pool import POOL_COMPONENT
from deltaflow_operator.decisions.pod import Pod
from deltaflow_operator.drift import child_version
from deltaflow_operator.kube import API_TIMEOUT, Kube
from deltaflow_operator.pool_keeper import (
    SETTLED_SYNC_SECONDS,
    SYNC_SECONDS,
    is_pool_pod,
    pool_pod_signal,
    pool_report_of,
)
from deltaflow_operator.reconcile import UNSEEN, Reconciler
from deltaflow_operator.settings import Settings

FINALIZER = f"{GROUP}/finalizer"
# No reconcile takes this long (API calls time out well before): one that does is hung.
HUNG_RECONCILE = 300.0
# An event loop that has not run for this long is wedged (see Loop.wedged).
LOOP_SILENT = 60.0
log = logging.getLogger(__name__)
# The kinds of what the operator applies (reconcile.children and the pools' companions, as
# tests/unit/test_rbac.py checks): watched so that an edit or a delete by someone else is put
# back within seconds. Every watch the operator holds asks the API server for its own objects
# only (its managed-by label): an unfiltered watch of ConfigMaps or pods carries the cluster's.
CHILD_RESOURCES = (
    ("", "v1", "configmaps"),
    ("", "v1", "serviceaccounts"),
    ("", "v1", "services"),
    ("batch", "v1", "cronjobs"),
    ("networking.k8s.io", "v1", "networkpolicies"),
    ("rbac.authorization.k8s.io", "v1", "rolebindings"),
)
MANAGED = {"app.kubernetes.io/managed-by": MANAGED_BY}


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
    pool_wake: asyncio.Event = field(default_factory=asyncio.Event)
    pool_task: asyncio.Task[None] | None = None  # held so the task is not garbage-collected
    pool_signals: dict[str, str] = field(default_factory=dict)  # pool pod key -> its last word

    def reconcile(
        self,
        namespace: str,
        name: str,
        driver_pod: Pod | None = UNSEEN,
        body: dict[str, Any] | None = None,
    ) -> float | None:
        """One reconciliation of one resource; seconds until it wants another look.
        ``driver_pod``: its driver pod as the pod index holds it (None: there is none);
        ``body``: the resource as the watch delivered it last (a copy of kopf's)."""
        key = f"{namespace}/{name}"
        with self.locks[key]:
            self.running[key] = time.monotonic()
            try:
                requeue = self.reconciler.reconcile(
                    namespace, name, watched_pod=driver_pod, watched_body=body
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

    async def keep_pools(
        self, every: float = SYNC_SECONDS, settled_every: float = SETTLED_SYNC_SECONDS
    ) -> None:
        """The stream pools' rounds (pool_keeper): every ``every`` s while something is in
        motion, every ``settled_every`` s once settled, and when a resource or a pool pod's
        word changes; the members whose pool or phase changed reconcile at once."""
        running = asyncio.get_running_loop()
        pools = self.reconciler.pools

        def nudge() -> None:  # from any thread
            running.call_soon_threadsafe(self.pool_wake.set)

        pools.on_nudge = nudge
        while True:
            self.pool_wake.clear()
            try:
                changed = await running.run_in_executor(None, pools.sync)
            except Exception:  # the next round tries again; the members keep their state
                log.exception("a stream pools round failed")
                pools.settled = False
                changed = set()
            for key in changed:
                self.wake(*key.split("/", 1))
            wait = settled_every if pools.settled else every
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.pool_wake.wait(), timeout=wait)

    def pool_pod_seen(self, key: str, signal: str | None) -> None:
        """A pool pod's event (``signal``: pool_keeper.pool_pod_signal; None: deleted): a
        round now if its word changed (call from the event loop)."""
        if self.pool_signals.get(key) != signal:
            if signal is None:
                self.pool_signals.pop(key, None)
            else:
                self.pool_signals[key] = signal
            self.pool_wake.set()

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
    async def start_pool_keeper(memo: kopf.Memo, **_: Any) -> None:
        memo.loop.pool_task = asyncio.get_running_loop().create_task(memo.loop.keep_pools())

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
        # kopf's own calls end too (kube.API_TIMEOUT for ours): a watch the server does not
        # end by its timeout is dropped and made again, a connection that hangs gives up.
        settings.watching.client_timeout = 90
        settings.watching.connect_timeout = API_TIMEOUT[0]
        settings.networking.connect_timeout = API_TIMEOUT[0]
        settings.networking.request_timeout = API_TIMEOUT[1]
        for group, version, plural in (*CHILD_RESOURCES, ("", "v1", "pods")):
            settings.watching.label_selectors[group, version, plural] = ",".join(
                f"{k}={v}" for k, v in MANAGED.items()
            )

    # A new or resumed resource gets its daemon, which reconciles at once; a spec change wakes
    # it (kopf's update handlers see the spec and metadata, never the status the operator
    # writes, so a reconcile does not wake itself).
    kopf.on.update(GROUP, VERSION, PLURAL)(_on_change)
    kopf.daemon(GROUP, VERSION, PLURAL, cancellation_timeout=10)(_stream_daemon)
    kopf.on.delete(GROUP, VERSION, PLURAL)(_on_delete)
    # Driver pods only: a crash or a phase change is acted on at once. Executor pods change
    # during every scaling action; the autoscaler reads them through the driver's report at
    # its own pace (waking it for each would add decisions, not information). kopf fills its
    # indexes before any handler runs, and updates them before the event handlers of an event.
    drivers = {**MANAGED, "app.kubernetes.io/component": "driver"}
    kopf.index("", "v1", "pods", labels=drivers)(driver_pods)
    kopf.on.event("", "v1", "pods", labels=drivers)(_on_pod_event)
    # Pool pods (the same pod watch): a change of a pool's word (a member failing or started,
    # the revision acknowledged) starts a pools round at once, not at the next settled one.
    pools = {**MANAGED, "app.kubernetes.io/component": POOL_COMPONENT}
    kopf.on.event("", "v1", "pods", labels=pools)(_on_pool_pod_event)
    for group, version, plural in CHILD_RESOURCES:
        kopf.on.event(group, version, plural, labels=MANAGED)(_on_child_event)


def driver_pods(
    namespace: str | None, labels: Mapping[str, str], body: kopf.Body, **_: Any
) -> dict[tuple[str, str], Pod]:
    """The pod index: (namespace, DeltaIngestion name) -> its driver pod (kopf drops deleted
    pods from it)."""
    instance = labels.get("app.kubernetes.io/instance")
    return {(str(namespace), instance): Pod.of(body)} if instance else {}


def _indexed_pod(index: kopf.Index[tuple[str, str], Pod], namespace: str, name: str) -> Pod | None:
    store = index.get((namespace, name))
    return next(iter(store), None) if store is not None else None


async def _on_change(namespace: str | None, name: str, memo: kopf.Memo, **_: Any) -> None:
    memo.loop.wake(str(namespace), name)
    memo.loop.pool_wake.set()  # a spec change may move it into a pool or out of one


async def _stream_daemon(
    namespace: str | None,
    name: str,
    stopped: kopf.DaemonStopped,
    memo: kopf.Memo,
    body: kopf.Body,
    **indexes: Any,
) -> None:
    # Async, so that a daemon per resource holds no thread while it waits; the reconcile itself
    # (blocking API calls) runs in the loop's thread pool. The index is read here, in the event
    # loop that updates it, and the round gets a snapshot.
    loop: Loop = memo.loop
    ns = str(namespace)
    wake = loop.wakes[f"{ns}/{name}"]
    pods: kopf.Index[tuple[str, str], Pod] = indexes["driver_pods"]  # kopf passes it by name
    running = asyncio.get_running_loop()
    # Done when kopf asks the daemon to stop (the resource deleted, the operator stopping). A
    # daemon waits on it and its wake-up together: polling the flag twice a second was 122
    # wake-ups a second at 61 streams.
    stopping = asyncio.ensure_future(stopped.wait())
    try:
        while not stopped:
            wake.clear()
            pod = _indexed_pod(pods, ns, name)
            # kopf keeps a daemon's body current with the watch; the round gets a copy of it now.
            watched = copy.deepcopy(dict(body))
            try:
                requeue = await running.run_in_executor(
                    None, loop.reconcile, ns, name, pod, watched
                )
            except Exception:  # reported in the status by the reconciler; try again later
                log.exception("reconciling %s/%s failed", ns, name)
                requeue = None
            if stopped or wake.is_set():
                continue
            delay = loop.interval if requeue is None else min(requeue, loop.interval)
            woken = asyncio.ensure_future(wake.wait())
            try:
                await asyncio.wait(
                    {woken, stopping}, timeout=delay, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                woken.cancel()
    finally:
        stopping.cancel()


async def _on_pod_event(
    namespace: str | None, labels: Mapping[str, str], memo: kopf.Memo, **_: Any
) -> None:
    instance = labels.get("app.kubernetes.io/instance")
    if instance:
        memo.loop.wake(str(namespace), instance)


async def _on_pool_pod_event(
    type: str | None,
    namespace: str | None,
    name: str | None,
    body: kopf.Body,
    memo: kopf.Memo,
    **_: Any,
) -> None:
    loop: Loop = memo.loop
    key = f"{namespace}/{name}"
    if type == "DELETED":
        loop.pool_pod_seen(key, None)
        return
    if not is_pool_pod(body):
        return  # a pool's labels on a pod no pool's ConfigMap controls: not ours
    report = pool_report_of(body, str(namespace), time.time())
    loop.reconciler.pools.heard(key, report)
    loop.pool_pod_seen(key, pool_pod_signal(body, report))


async def _on_child_event(
    type: str | None, namespace: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any
) -> None:
    """A child's event: its owner (a DeltaIngestion, or a pool's ConfigMap for the pool's
    companions) applies it again if someone else changed or deleted it."""
    loop: Loop = memo.loop
    meta = body.get("metadata") or {}
    kind, name, ns = str(body.get("kind")), str(meta.get("name")), str(namespace)
    version = None if type == "DELETED" else child_version(body)
    for owner in meta.get("ownerReferences") or []:
        of, by = owner.get("kind"), str(owner.get("name"))
        if of == KIND and loop.reconciler.child_seen(ns, by, kind, name, version):
            loop.wake(ns, by)
        elif of == "ConfigMap" and loop.reconciler.pools.companion_seen(
            ns, by, kind, name, version
        ):
            loop.pool_wake.set()


def _on_delete(namespace: str | None, name: str, memo: kopf.Memo, **_: Any) -> None:
    loop: Loop = memo.loop
    with loop.locks[f"{namespace}/{name}"]:
        loop.reconciler.finalize(str(namespace), name)
    loop.forget(str(namespace), name)
    loop.reconciler.pools.nudge()  # a pooled one leaves its pool now, not at a settled round
