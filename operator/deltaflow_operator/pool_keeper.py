"""The operator's stream pools: which pooled stream runs in which pool, and the pools' objects.

One round (``sync``) lists the DeltaIngestions, the pools' ConfigMaps and their pods (three
requests whatever the fleet's size), packs the pooled streams into pools
(``decisions.pools.pack``, by the task time each uses there), and writes what changed: a pool's
ConfigMap (its members and revision), its companions, its pod (created when missing, replaced
when its spec changed, touched with the new revision so the kubelet brings the change at once).
A pool left without members is deleted with its ConfigMap (its objects are owned by it).

A stream is a member only once its own driver is gone: its reconcile sets
``status.placement.mode: pooled`` after that, and this keeper pools only streams whose status
says so. The reverse handshake is :meth:`PoolKeeper.released`: a stream leaving its pool gets a
driver of its own only once no pool's ConfigMap lists it and every pool of its namespace has
reported the revision without it, the stream absent (its in-flight batch committed). A move
never overlaps; the runtime's duplicate-writer check stays the backstop.

The reconciles read what the pools reported about their member from here (``view``): no request
per stream.

Rounds come every SYNC_SECONDS while something is in motion (a stream waiting to join or leave,
a pool that has not acknowledged its revision), every SETTLED_SYNC_SECONDS once all is settled,
and at once when a resource's spec changes or a pool pod's word does (``pool_pod_signal``, from
the operator's pod watch: a member failing is acted on in a second, not at the next round).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import yaml
from pydantic import ValidationError

from deltaflow_api import DeltaIngestion
from deltaflow_api.channel import POOL_REPORT_ANNOTATION
from deltaflow_operator.autoscaler.observe import MemberReport, PoolReport, parse_pool_report
from deltaflow_operator.builders import pool as builders
from deltaflow_operator.builders.common import MANAGED_BY
from deltaflow_operator.builders.driver import pipeline_document
from deltaflow_operator.decisions.ownership import read_claim
from deltaflow_operator.decisions.pooled import BatchSighting, pool_behind
from deltaflow_operator.decisions.pools import (
    Member,
    PoolLimits,
    pack,
    settled_reading,
    wants_pool,
)
from deltaflow_operator.drift import RESYNC_SECONDS, Drift, child_key, child_version
from deltaflow_operator.kube import Kube
from deltaflow_operator.settings import Settings

log = logging.getLogger(__name__)


def pool_selector(settings: Settings) -> str:
    """This release's pools (another release's are never read, changed or deleted here)."""
    return (
        f"app.kubernetes.io/component={builders.POOL_COMPONENT},"
        f"app.kubernetes.io/managed-by={MANAGED_BY},"
        f"{builders.RELEASE_LABEL}={builders.release_label(settings)}"
    )


# Of a pool's task threads, what its members may use in all: the rest is headroom for bursts.
POOL_CORE_SHARE = 0.8
SYNC_SECONDS = 5.0
# A round with nothing in motion: a pool pod's change of word wakes one anyway (pool_pod_signal).
# At 5 s, three LISTs and every DeltaIngestion validated were 36 API requests a minute and most
# of an idle fleet's operator CPU (FL5).
SETTLED_SYNC_SECONDS = 30.0


@dataclass(frozen=True)
class KnownPool:
    """A pool as this operator last wrote it (or found it at start)."""

    namespace: str
    name: str
    members: dict[str, str]  # member key -> digest of its document
    revision: int
    config_map_uid: str
    # When this process last applied its companions (0: never; monotonic). Applied again when
    # the watch shows one changed by someone else (companion_seen), the pool changed, or every
    # RESYNC_SECONDS.
    companions_at: float = 0.0


@dataclass(frozen=True)
class MemberView:
    """What a pooled stream's reconcile needs to know: its pool and the pool's word on it."""

    pool: str | None  # the pool pod it is assigned to (None: not yet)
    report: MemberReport | None  # None: the pool has not reported it (yet)
    reported_at: float | None  # when the pool made the report read
    pool_behind: bool = False  # most of its pool's other members miss their targets too
    sighting: BatchSighting | None = None  # its last batch, as first seen


def _ever_ran(pod: dict[str, Any]) -> bool:
    """Whether the pod's container has run at all (now or before a restart): one stuck pulling
    its image or unschedulable never started a member."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        state, last = status.get("state") or {}, status.get("lastState") or {}
        if state.get("running") or state.get("terminated") or last.get("terminated"):
            return True
    return False


def is_pool_pod(pod: Mapping[str, Any]) -> bool:
    """Whether a pod carrying a pool's labels is a pool's: controlled by the ConfigMap of its
    own name, as the keeper makes each (labels prove nothing: whoever may create a pod in the
    namespace can set them, and such a pod would hold every move there as "shutting down").
    A pool pod whose ConfigMap has gone still is one until garbage collection removes it."""
    meta = pod.get("metadata") or {}
    return any(
        o.get("kind") == "ConfigMap" and o.get("name") == meta.get("name") and o.get("controller")
        for o in meta.get("ownerReferences") or []
    )


# A pool pod this long without a sound report (since it started) holds up only the moves of
# streams it may run (PoolKeeper._still_running): not every move of its namespace for ever.
SILENT_POOL_SECONDS = 300.0


def silent_pool_holds(pool: str, last_pool: str | None, silent_for: float) -> bool:
    """Whether a pool pod that has said nothing sound for ``silent_for`` seconds since it
    started holds up a stream whose status last named ``last_pool`` (and which the pool's
    ConfigMap does not list): while it may still be starting, every stream (a new leader does
    not know which it was given); after SILENT_POOL_SECONDS, only the one last there."""
    return silent_for < SILENT_POOL_SECONDS or pool == last_pool


def silent_for(pod: Mapping[str, Any], now: float) -> float:
    """Seconds since the pod started (0 when not known: it holds moves up as a new one would)."""
    started = (pod.get("status") or {}).get("startTime")
    if not started:
        return 0.0
    try:
        return now - datetime.fromisoformat(str(started).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def _last_pool(ingestion: DeltaIngestion) -> str | None:
    placement = ingestion.status.placement if ingestion.status else None
    return None if placement is None else placement.pool


def _owner_uid(pod: dict[str, Any]) -> str | None:
    """The uid of the ConfigMap that owns a pool's pod."""
    owners = pod["metadata"].get("ownerReferences") or []
    return next((str(o.get("uid")) for o in owners if o.get("kind") == "ConfigMap"), None)


def _digest(document: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()[:16]


def _text_digest(text: str) -> str:
    """The digest of a member file as this operator writes it ("": not a document, e.g.
    someone else's edit, rewritten with the next round's)."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError:
        return ""
    return _digest(document) if isinstance(document, dict) else ""


def _newer(report: PoolReport, than: PoolReport) -> bool:
    return report.at > than.at


def settled_after(pools: dict[str, KnownPool], reports: dict[str, PoolReport]) -> bool:
    """Whether every pool runs what its ConfigMap says: it reported the current revision with
    exactly its members, none starting or stopping, and no other pool pod still reports."""
    if set(reports) - set(pools):
        return False  # a pod of a pool gone or replaced, still running what it had
    for key, pool in pools.items():
        report = reports.get(key)
        if report is None or report.revision is None or report.revision < pool.revision:
            return False
        if set(report.members) != set(pool.members):
            return False
        if any(m.phase in ("Starting", "Stopping") for m in report.members.values()):
            return False
    return True


def pool_report_of(pod: Mapping[str, Any], namespace: str, now: float) -> PoolReport | None:
    """The report on a pool pod (None: none, or not sound), read at the operator's ``now``."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return parse_pool_report(annotations.get(POOL_REPORT_ANNOTATION), namespace, now=now)


def pool_pod_signal(pod: Mapping[str, Any], report: PoolReport | None) -> str:
    """What of a pool pod's change calls for a round now: its container's state and restarts,
    its deletion, and its ``report``'s word (revision, members, each one's phase and failures);
    not the figures a report refreshes every heartbeat."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    containers = [
        [c.get("restartCount"), sorted((c.get("state") or {}).keys())]
        for c in status.get("containerStatuses") or []
    ]
    said: object = (
        (meta.get("annotations") or {}).get(POOL_REPORT_ANNOTATION)  # none, or not sound
        if report is None
        else [
            report.revision,
            {k: [m.phase, m.failures, m.reason] for k, m in report.members.items()},
        ]
    )
    signal = [bool(meta.get("deletionTimestamp")), status.get("phase"), containers, said]
    return json.dumps(signal, sort_keys=True, default=str)


class PoolKeeper:
    """Keeps the pools in line with the pooled streams; answers the reconciles' questions."""

    def __init__(self, kube: Kube, settings: Settings) -> None:
        self.kube = kube
        self.settings = settings
        self._lock = threading.Lock()
        # Held for a whole round: ``released`` waits for a round under way, which may be adding
        # the stream from a listing made before its spec changed.
        self._round = threading.Lock()
        self._pools: dict[str, KnownPool] = {}
        self._pods: dict[str, dict[str, Any]] = {}  # pool key -> its pod, as last listed
        self._reports: dict[str, PoolReport] = {}
        self._loaded = False
        self._seen: dict[str, tuple[str, str | None, int]] = {}
        # Each member's last measured load: a report missing for a round (its pool's pod
        # replaced) must not make it look unmeasured and move it (decisions.pools.pack).
        self._loads: dict[str, float] = {}
        # Document text -> digest: a ConfigMap's members are parsed only when they changed.
        self._digests: dict[str, str] = {}
        self._sightings: dict[str, BatchSighting] = {}  # member key -> see _sight
        self._sizes: dict[tuple[str, object], int] = {}  # see _measure_sizes
        self._drift = Drift()  # pool key -> its companions changed by someone else
        # Whether the last round found nothing in motion (see settled_after).
        self.settled = False
        # Set by the operator's loop: asks for a round now, from any thread (nudge).
        self.on_nudge: Callable[[], None] | None = None

    def companion_seen(
        self, namespace: str, pool: str, kind: str, name: str, version: str | None
    ) -> bool:
        """The watch on the operator's children delivered one of ``pool``'s companions at
        ``version`` (``drift.child_version``; None: deleted). Whether it differs from what this
        process applied: the next round applies the pool's companions again (the caller asks
        for one)."""
        return self._drift.seen(f"{namespace}/{pool}", child_key(kind, name), version)

    def nudge(self) -> None:
        """A round now, not at the settled pace: a stream's placement changed (it joins or
        leaves a pool, auto decided a move) or a stream was deleted."""
        if self.on_nudge is not None:
            self.on_nudge()

    def heard(self, key: str, report: PoolReport | None) -> None:
        """A pool pod's report as the watch delivered it: if newer than the one held, it is
        what the members' reconciles read from now (a heartbeat keeps them under the
        staleness limit between settled rounds)."""
        if report is None:
            return
        with self._lock:
            held = self._reports.get(key)
            if key in self._pods and (held is None or _newer(report, held)):
                self._reports[key] = report
                self._sight(report)

    # --- the reconciles' questions (no API request) -----------------------------------------
    def view(self, namespace: str, name: str) -> MemberView:
        key = f"{namespace}/{name}"
        with self._lock:
            pool = next((p for p in self._pools.values() if key in p.members), None)
            if pool is None:
                return MemberView(None, None, None)
            report = self._reports.get(f"{namespace}/{pool.name}")
            if report is None:
                return MemberView(pool.name, None, None)
            return MemberView(
                pool.name,
                report.members.get(key),
                report.at,
                pool_behind(report, key),
                self._sightings.get(key),
            )

    def released(self, namespace: str, name: str, last_pool: str | None = None) -> str | None:
        """None once no pool can be running the stream; else why it may still be.
        ``last_pool``: the pool its status last named (status.placement.pool)."""
        with self._round, self._lock:
            if not self._loaded:
                return "the operator has not read its pools yet"
            return self._still_running(f"{namespace}/{name}", last_pool)

    def listed(self, namespace: str, name: str) -> str | None:
        """Why a pool may run the stream, from what the pools list (their ConfigMaps and
        reports); None when none does. The check before any driver is created: a stream
        deleted in a pool and created again under its name waits for its old run to end. Unlike
        :meth:`released` it is not held up by a pool that has not reported."""
        key = f"{namespace}/{name}"
        with self._round, self._lock:
            if not self._loaded:
                return "the operator has not read its pools yet"
            for pool in self._pools.values():
                if key in pool.members:
                    return f"pool {pool.name} has it as a member"
            for pool_key, report in self._reports.items():
                if key in report.members:
                    return f"pool {pool_key.split('/', 1)[1]} still runs it"
        return None

    def _still_running(self, key: str, last_pool: str | None) -> str | None:
        """Why a pool may still run the member ``key`` (None: none can). Every pool of its
        namespace is asked, not only the one it was last given to: a new leader does not know
        which pool that was. A pool pod that has run SILENT_POOL_SECONDS without a sound report
        (a wrong image, a pod that cannot reach the API) holds only the streams it may run: a
        pool reads only the ConfigMap of its own name, so those that ConfigMap lists (asked
        first) and the one whose status says it was last there (``last_pool``). Call with
        ``_lock`` held."""
        for pool in self._pools.values():
            if key in pool.members:
                return f"pool {pool.name} still has it as a member"
        namespace, now = key.split("/", 1)[0], time.time()
        for pool_key, pod in self._pods.items():
            if not pool_key.startswith(f"{namespace}/") or not _ever_ran(pod):
                continue  # a pod whose container never started runs nothing
            pool_name = pod["metadata"]["name"]
            report = self._reports.get(pool_key)
            known = self._pools.get(pool_key)
            if report is None:
                if not silent_pool_holds(pool_name, last_pool, silent_for(pod, now)):
                    continue  # it never had this stream: it cannot be running it
                return f"pool {pool_name} has not reported on its members yet"
            if key in report.members:
                return f"pool {pool_name} is stopping it ({report.members[key].phase})"
            if known is None or _owner_uid(pod) != known.config_map_uid:
                # Its ConfigMap is gone, or this pod belongs to an earlier one of the name: its
                # revisions are not the new ConfigMap's. It runs what it reports until it ends.
                return f"pool {pool_name} is shutting down"
            if report.revision is None or report.revision < known.revision:
                return f"pool {pool_name} has not yet read revision {known.revision}"
        return None

    # --- one round ------------------------------------------------------------------------
    def sync(self) -> set[str]:
        """One round; returns the members (``namespace/name``) whose pool or phase changed in
        it (their reconcile is due now, the others' at their interval)."""
        with self._round:
            self._sync()
            with self._lock:
                seen = {
                    key: (
                        pool.name,
                        report.phase if report else None,
                        report.failures if report else 0,
                    )
                    for pool in self._pools.values()
                    for key in pool.members
                    for report in [self._member_report(pool, key)]
                }
            changed = {
                k for k in seen.keys() | self._seen.keys() if seen.get(k) != self._seen.get(k)
            }
            self._seen = seen
            return changed

    def _member_report(self, pool: KnownPool, key: str) -> MemberReport | None:
        report = self._reports.get(f"{pool.namespace}/{pool.name}")
        return None if report is None else report.members.get(key)

    def _sync(self) -> None:
        namespaces = self.settings.watch_namespaces
        self._load(namespaces)  # the cluster's word each round, not this process's memory
        members, moving = self._members(self.kube.list_ingestions(namespaces))
        groups = {key: builders.group_of(i, self.settings) for key, i in members.items()}
        with self._lock:
            current = {
                m: f"{p.namespace}/{p.name}" for p in self._pools.values() for m in p.members
            }
            for report in self._reports.values():
                for member, said in report.members.items():
                    # A reading lifted by the member's own start is no load (the last one
                    # before it stands, or it is packed as not measured).
                    reading = settled_reading(said.busy_cores, said.started_at, report.at)
                    if reading is not None:
                        self._loads[member] = reading
            self._loads = {m: c for m, c in self._loads.items() if m in members}
            loads = dict(self._loads)
        limits = PoolLimits(self.settings.pool_members, self.settings.pool_cores * POOL_CORE_SHARE)
        sizes = self._measure_sizes(members)
        placed = pack(
            [Member(key, groups[key], loads.get(key), sizes[key]) for key in sorted(members)],
            current,
            limits,
        )
        held = False
        with self._lock:
            for key in [k for k, pool in placed.items() if current.get(k) != pool]:
                # Joining, or moving to another pool (its old one outgrown): it leaves the old
                # pool this round and joins the new one only once no pool can be running it.
                if self._still_running(key, _last_pool(members[key])) is not None:
                    del placed[key]
                    held = True
        by_pool: dict[str, list[DeltaIngestion]] = {}
        for key, pool_key in placed.items():
            by_pool.setdefault(pool_key, []).append(members[key])
        acted = False
        for pool_key in sorted(set(by_pool) | set(self._pools)):
            try:
                acted |= self._sync_pool(pool_key, by_pool.get(pool_key, []))
            except Exception:  # one pool's trouble (a quota, say) must not hold up the others
                log.exception("pool %s: could not bring it in line", pool_key)
                acted = True
        with self._lock:
            self.settled = (
                not held and not acted and not moving and settled_after(self._pools, self._reports)
            )

    def _measure_sizes(self, members: dict[str, DeltaIngestion]) -> dict[str, int]:
        """Each member's builders.pool.member_bytes, rendered once per spec generation (kept
        for this round's members only)."""
        generations = {k: (k, i.metadata.get("generation")) for k, i in members.items()}
        self._sizes = {
            generation: self._sizes.get(generation) or builders.member_bytes(members[key])
            for key, generation in generations.items()
        }
        return {key: self._sizes[generation] for key, generation in generations.items()}

    def _members(self, bodies: list[dict[str, Any]]) -> tuple[dict[str, DeltaIngestion], int]:
        """The streams this release serves that should run in a pool (spec.placement pooled, or
        auto deciding so) and whose own driver is gone (their status says so), by key; and how
        many others are between a pool and a driver of their own."""
        found: dict[str, DeltaIngestion] = {}
        moving = 0
        for body in bodies:
            if body["metadata"].get("deletionTimestamp"):
                continue
            claim = read_claim(body.get("status"))
            if claim is None or claim.operator != self.settings.identity:
                continue  # another release's, or not claimed yet (its reconcile comes first)
            try:
                ingestion = DeltaIngestion.model_validate(body)
            except ValidationError:
                continue  # its reconcile reports it
            placement = ingestion.status.placement if ingestion.status else None
            wanted = wants_pool(ingestion.spec, placement)
            pooled = placement is not None and placement.mode == "pooled"
            if wanted and pooled:
                found[f"{ingestion.namespace}/{ingestion.name}"] = ingestion
            elif wanted or pooled:
                moving += 1  # its driver going before it joins, or leaving its pool
        return found, moving

    def _load(self, namespaces: tuple[str, ...]) -> None:
        """The pools as the cluster holds them: their ConfigMaps, pods and reports (three
        requests a round with the DeltaIngestions', whatever the fleet's size)."""
        pools: dict[str, KnownPool] = {}
        digests: dict[str, str] = {}
        for config_map in self.kube.list_config_maps(namespaces, pool_selector(self.settings)):
            meta, data = config_map["metadata"], config_map.get("data") or {}
            if meta.get("deletionTimestamp"):
                continue
            members = {}
            for file, text in data.items():
                if file.endswith(".yaml"):
                    key = f"{meta['namespace']}/{file.removesuffix('.yaml')}"
                    members[key] = digests[text] = self._digests.get(text) or _text_digest(text)
            revision = str(data.get(builders.REVISION_KEY, "0"))
            key = f"{meta['namespace']}/{meta['name']}"
            known = self._pools.get(key)
            pools[key] = KnownPool(
                meta["namespace"],
                meta["name"],
                members,
                int(revision) if revision.isdigit() else 0,
                str(meta["uid"]),
                known.companions_at if known and known.config_map_uid == str(meta["uid"]) else 0.0,
            )
        pods: dict[str, dict[str, Any]] = {}
        reports: dict[str, PoolReport] = {}
        for pod in self.kube.list_pods(namespaces, pool_selector(self.settings)):
            meta = pod["metadata"]
            key = f"{meta['namespace']}/{meta['name']}"
            if not is_pool_pod(pod):
                continue  # not one of ours, whatever its labels say
            pods[key] = pod
            report = pool_report_of(pod, meta["namespace"], time.time())
            if report is not None:
                reports[key] = report
        with self._lock:
            for key, report in reports.items():  # the watch may have brought a newer one
                held = self._reports.get(key)
                if held is not None and _newer(held, report):
                    reports[key] = held
            self._pools, self._pods, self._reports = pools, pods, reports
            self._digests = digests
            self._loaded = True
            listed = {m for report in reports.values() for m in report.members}
            self._sightings = {k: v for k, v in self._sightings.items() if k in listed}
            for report in reports.values():
                self._sight(report)

    def _sight(self, report: PoolReport) -> None:
        """Note when each member's batch id was first seen, and when Kafka last held nothing
        for it (the stall verdict's clocks, decisions.pooled.member_verdict). Call with
        ``_lock`` held."""
        now = time.time()
        for key, said in report.members.items():
            held = self._sightings.get(key)
            caught_up = now if said.lag_records == 0 else (held.caught_up_at if held else None)
            if held is None or held.batch != said.last_batch:
                self._sightings[key] = BatchSighting(said.last_batch, now, caught_up)
            elif caught_up != held.caught_up_at:
                self._sightings[key] = replace(held, caught_up_at=caught_up)

    def _sync_pool(self, pool_key: str, members: list[DeltaIngestion]) -> bool:
        """Write what the pool's objects lack; whether anything was written."""
        namespace, name = pool_key.split("/", 1)
        known = self._pools.get(pool_key)
        if not members:
            if known is not None:
                log.info("pool %s: no members left, deleting it", pool_key)
                self.kube.delete_config_map(namespace, name)  # its pod and the rest follow
                with self._lock:
                    del self._pools[pool_key]
                self._drift.forget(pool_key)
                return True
            return False
        members.sort(key=lambda m: m.name)
        docs = {f"{m.namespace}/{m.name}": _digest(pipeline_document(m)) for m in members}
        changed = known is None or known.members != docs
        # Never a revision an earlier ConfigMap of the name had: its pod may still report one.
        revision = (
            known.revision
            if known is not None and not changed
            else max(0 if known is None else known.revision + 1, int(time.time() * 1000))
        )
        pool = builders.Pool(namespace, name, tuple(members), revision)
        uid = known.config_map_uid if known is not None else ""
        if changed:
            applied = self.kube.apply(builders.config_map(pool, self.settings))
            uid = str(applied["metadata"]["uid"])
            with self._lock:  # what the cluster holds now, whatever fails after
                self._pools[pool_key] = KnownPool(namespace, name, docs, revision, uid)
            joined = sorted(set(docs) - set(known.members if known else {}))
            left = sorted(set(known.members if known else {}) - set(docs))
            log.info(
                "pool %s: revision %d (%d members; joined %s; left %s)",
                pool_key, revision, len(docs), joined or "none", left or "none",
            )  # fmt: skip
        drifted = self._drift.pending(pool_key)
        applied_at = 0.0 if changed or known is None else known.companions_at
        reapply = (
            not applied_at
            or bool(drifted.children)
            or time.monotonic() - applied_at >= RESYNC_SECONDS
        )
        if reapply:
            companions = {
                child_key(manifest["kind"], manifest["metadata"]["name"]): child_version(
                    self.kube.apply(manifest)
                )
                for manifest in builders.companions(pool, self.settings, uid)
            }
            applied_at = time.monotonic()
            if restored := self._drift.applied(pool_key, drifted, companions):
                log.info("pool %s: %s changed or deleted outside the operator: applied again",
                         pool_key, ", ".join(restored))  # fmt: skip
        with self._lock:
            self._pools[pool_key] = KnownPool(namespace, name, docs, revision, uid, applied_at)
        return self._keep_pod(pool, uid) or reapply

    def _keep_pod(self, pool: builders.Pool, config_map_uid: str) -> bool:
        """The pool's pod as it should be: created, replaced when its spec changed, touched
        when its members changed. Whether it wrote (or waits for a replaced pod to go)."""
        pod = self._pods.get(pool.key)
        wanted = builders.pod_spec_hash(pool, self.settings)
        if pod is None:
            if self.kube.create_pod(builders.pod(pool, self.settings, config_map_uid)):
                log.info("pool %s: created its pod", pool.key)
            return True
        annotations = pod["metadata"].get("annotations") or {}
        if pod["metadata"].get("deletionTimestamp"):
            return True  # being replaced: created anew once gone
        if _owner_uid(pod) != config_map_uid:
            # An earlier ConfigMap's pod (garbage collection had not come yet): it goes first.
            log.info("pool %s: its pod belongs to an earlier ConfigMap, replacing it", pool.key)
            self.kube.delete_pod(pool.namespace, pool.name, uid=pod["metadata"]["uid"])
            return True
        if annotations.get(builders.POOL_SPEC_HASH_ANNOTATION) != wanted:
            log.info("pool %s: its pod's spec changed, replacing it", pool.key)
            self.kube.delete_pod(pool.namespace, pool.name, uid=pod["metadata"]["uid"])
            return True
        if annotations.get(builders.REVISION_ANNOTATION) != str(pool.revision):
            # A pod's update makes the kubelet sync its volumes now, not within its next minute.
            self.kube.annotate_pod(
                pool.namespace, pool.name, {builders.REVISION_ANNOTATION: str(pool.revision)}
            )
            return True
        return False
