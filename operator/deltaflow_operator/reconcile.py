"""One reconciliation of a DeltaIngestion: observe, decide (pure), act, report.

Observes once per round (the resource, its driver pod; the stored pipeline config only when
the generation moved): the resource from the operator's watch when that provably holds what
this process last read or wrote, else from the API server, so a restarted operator resumes from
what the cluster holds. Memory only saves requests: children are re-applied when what they
should be changed, when the watch on them shows one changed or deleted by someone else
(``child_seen``), and every ``RESYNC_SECONDS`` in case a watch missed it; the status is
written only when it differs from the stored one. A new leader starts with no memory and so
applies everything once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import yaml
from pydantic import ValidationError

from deltaflow_api import DeltaIngestion, names
from deltaflow_api.crd import strip_nones
from deltaflow_api.driver_pod import SPARK_MODE_ANNOTATION
from deltaflow_api.errors import describe
from deltaflow_api.identity import identity
from deltaflow_api.reasons import ConditionType, EventReason, Reason
from deltaflow_api.v1alpha1 import (
    AutoscalerStatus,
    Condition,
    DeltaIngestionStatus,
    DriverStatus,
    ExecutorStatus,
    LagStatus,
    PlacementStatus,
)
from deltaflow_operator import metrics
from deltaflow_operator.autoscaler.engine import Autoscaler
from deltaflow_operator.autoscaler.explain import ScalingOutcome
from deltaflow_operator.autoscaler.observe import MemberReport, ReportReading
from deltaflow_operator.builders import driver as driver_builders
from deltaflow_operator.builders.common import config_map_name, driver_pod_name
from deltaflow_operator.builders.maintenance import JOBS, maintenance_cronjob
from deltaflow_operator.builders.network_policy import network_policies
from deltaflow_operator.decisions.changes import changed_fields, needs_driver_replacement
from deltaflow_operator.decisions.conditions import condition, set_condition, settled_transitions
from deltaflow_operator.decisions.cost import cost_status, member_cost_status
from deltaflow_operator.decisions.driver import (
    DeleteReason,
    DriverPlan,
    Observed,
    decide_driver,
)
from deltaflow_operator.decisions.freshness import behind, freshness_verdict, trigger_seconds
from deltaflow_operator.decisions.ownership import (
    Ownership,
    Sighting,
    claim_record,
    decide_ownership,
    read_claim,
    renew_with_write,
)
from deltaflow_operator.decisions.placement import (
    AUTO_PLACEMENT,
    LEFT_POOL,
    driver_mode,
    moved,
    place,
)
from deltaflow_operator.decisions.pod import Pod
from deltaflow_operator.decisions.pooled import (
    POOL_REPORT_STALE_SECONDS,
    MemberVerdict,
    member_verdict,
)
from deltaflow_operator.decisions.pools import auto_placement, moved_between_pools, wants_pool
from deltaflow_operator.decisions.progress import group_commit_degraded, stream_progress
from deltaflow_operator.decisions.status import status_write_due
from deltaflow_operator.drift import (
    RESYNC_SECONDS,
    Drift,
    child_key,
    child_version,
    restore_waits,
    restored_at,
)
from deltaflow_operator.kube import Kube
from deltaflow_operator.pool_keeper import PoolKeeper
from deltaflow_operator.settings import Settings

log = logging.getLogger(__name__)

# A round reads the resource from the operator's watch (kopf's body) when that holds the version
# this operator last read or wrote; from the API server after any other write, and at least this
# often. A GET per round had been a third of the operator's requests (FL5).
BODY_RESYNC_SECONDS = 600.0
# Another release serves a resource being deleted: how long this one waits for it to stop the
# driver before doing so itself.
FINALIZE_WAIT_SECONDS = 60.0
# A pooled stream waiting (for its driver to go, a pool, its start there, its leave) is looked at
# this often; one running in its pool at the reconcile interval, or when the pool keeper sees its
# phase change (one request per stream per minute, as for a driver of its own).
POOL_WAIT_SECONDS = 2.0
POOLED_BY_SPEC = "SpecPlacement"
# The pod watch has not delivered this resource's driver pod (yet): read it from the API.
UNSEEN = Pod(name="", namespace="", uid="unseen")


@dataclass(frozen=True)
class Seen:
    """One round's observation: the resource as stored, parsed, how its spec moved since the
    driver's config was written, and its driver pod."""

    body: dict[str, Any]
    ingestion: DeltaIngestion
    first_time: bool  # no config stored yet: the first reconcile of this resource
    changed: list[str]  # spec fields changed since the stored config
    driver_pod: Pod | None


@dataclass
class _Applied:
    """What this process last applied for one resource incarnation."""

    uid: str
    generation: int | None
    children_digest: str
    at: float
    restores: tuple[float, ...] = ()  # when it last put back children changed by someone else


def children(ingestion: DeltaIngestion, settings: Settings) -> list[dict[str, Any]]:
    """Every child except the driver pod, in the order they are applied."""
    return [
        # First: the driver pod, created after the children, never runs open to other pods.
        *network_policies(ingestion, settings),
        driver_builders.service_account(ingestion, settings),
        driver_builders.role_binding(ingestion, settings),
        driver_builders.driver_service(ingestion, settings),
        driver_builders.config_map(ingestion, settings),
        *(maintenance_cronjob(ingestion, settings, job) for job in JOBS),
    ]


class Reconciler:
    """Wires the pure builders and decisions to the API through :class:`Kube`."""

    def __init__(self, kube: Kube, settings: Settings) -> None:
        self.kube = kube
        self.settings = settings
        self.autoscaler = Autoscaler(kube)
        self.pools = PoolKeeper(kube, settings)
        self._applied: dict[str, _Applied] = {}
        self._drift = Drift()  # children changed by someone else (child_seen)
        # Ownership (decisions.ownership): another release's claim on each resource this
        # process stands back from, as last seen, and what it told about each.
        self._sightings: dict[str, Sighting] = {}
        self._told: dict[str, tuple[str, str]] = {}
        # Per resource: the version this process last read or wrote, and when it last read it.
        self._versions: dict[str, tuple[str, float]] = {}
        # Per resource: when this process last wrote its status (monotonic; decisions.status).
        self._status_written: dict[str, float] = {}
        # Per resource: when a round last found Kafka holding nothing for it (epoch seconds;
        # decisions.progress times a stall from then, not from a batch before an idle spell).
        self._caught_up_at: dict[str, float] = {}
        # Per pooled stream: the pool it last ran in (a move between pools is told once).
        self._member_pools: dict[str, str] = {}

    def reconcile(
        self,
        namespace: str,
        name: str,
        watched_pod: Pod | None = UNSEEN,
        watched_body: dict[str, Any] | None = None,
    ) -> float | None:
        """Bring one DeltaIngestion's children in line with its spec; seconds until next look.

        ``watched_pod``: its driver pod as the pod watch last delivered it (None: deleted),
        or ``UNSEEN`` to read it from the API server. ``watched_body``: the resource as the
        watch last delivered it (a copy), used when it is current (see ``_read``)."""
        started = time.monotonic()
        try:
            body = self._serving(namespace, name, watched_body)
            if body is None:
                return None  # gone, being deleted, or served by another operator release
            try:
                return self._reconcile(body, watched_pod)
            except Exception as error:
                self._report_failure(namespace, name, error)
                raise
        finally:
            metrics.RECONCILE_SECONDS.observe(time.monotonic() - started)

    def _serving(
        self, namespace: str, name: str, watched: dict[str, Any] | None = None
    ) -> dict[str, Any] | None:
        """The resource as stored if this operator serves it (claiming or renewing its claim in
        ``status.operator`` when due, see :mod:`~deltaflow_operator.decisions.ownership`);
        None if it is gone, being deleted, or another release serves it."""
        key = f"{namespace}/{name}"
        for attempt in range(3):  # a claim lost to a concurrent write is decided again anew
            body = self._read(namespace, name, watched if attempt == 0 else None)
            if body is None or body["metadata"].get("deletionTimestamp"):
                return None  # no series for a resource being deleted (finalize removed them)
            decision = self._ownership(key, body)
            if decision.action == "stand_back":
                self._stand_back(key, body, decision)
                return None
            self._sightings.pop(key, None)
            metrics.STANDING_BACK.set(len(self._sightings))
            if decision.action == "serve":
                return body
            record = claim_record(self.settings.identity, datetime.now(UTC))
            stored = self.kube.claim(namespace, name, body["metadata"]["resourceVersion"], record)
            if stored is None:
                continue
            self._wrote(key, str(stored["metadata"]["resourceVersion"]))
            if decision.action == "claim" and read_claim(body.get("status")) is not None:
                log.warning("%s: %s", key, decision.message)
                self.kube.post_event(
                    stored, "Warning", EventReason.OPERATOR_TOOK_OVER, decision.message
                )
            elif decision.action == "claim":
                log.info("%s: serving it (status.operator: %s)", key, self.settings.identity)
            return stored
        return None

    def _read(
        self, namespace: str, name: str, watched: dict[str, Any] | None
    ) -> dict[str, Any] | None:
        """The resource: ``watched`` when it is at the version this process last read or wrote
        (the watch delivered that write, nothing came after it) and the last read is under
        BODY_RESYNC_SECONDS old; else from the API server."""
        key = f"{namespace}/{name}"
        known = self._versions.get(key)
        if (
            watched is not None
            and known is not None
            and watched.get("metadata", {}).get("resourceVersion") == known[0]
            and time.monotonic() - known[1] < BODY_RESYNC_SECONDS
        ):
            return watched
        body = self.kube.get_ingestion(namespace, name)
        if body is None:
            self._versions.pop(key, None)
        else:
            self._versions[key] = (str(body["metadata"]["resourceVersion"]), time.monotonic())
        return body

    def _wrote(self, key: str, version: str | None) -> None:
        """This process's write left the resource at ``version`` (None: it is gone)."""
        known = self._versions.get(key)
        if version is None or known is None:
            self._versions.pop(key, None)
        else:
            self._versions[key] = (version, known[1])

    def _patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        key = f"{namespace}/{name}"
        self._wrote(key, self.kube.patch_status(namespace, name, status))
        self._status_written[key] = time.monotonic()

    def _ownership(self, key: str, body: dict[str, Any]) -> Ownership:
        return decide_ownership(
            read_claim(body.get("status")),
            me=self.settings.identity,
            now=datetime.now(UTC),
            monotonic=time.monotonic(),
            sighting=self._sightings.get(key),
            renew_after=self.settings.ownership_renew_seconds,
            expire_after=self.settings.ownership_expire_seconds,
        )

    def _stand_back(self, key: str, body: dict[str, Any], decision: Ownership) -> None:
        """Leave the resource to its owner; say so once per owner (log and Event)."""
        assert decision.sighting is not None  # standing back is always about a claim seen
        self._sightings[key] = decision.sighting
        told = (str(body["metadata"].get("uid")), decision.owner)
        if self._told.get(key) != told:
            log.info("%s: %s", key, decision.message)
            self.kube.post_event(
                body, "Normal", EventReason.OPERATOR_STANDING_BACK, decision.message
            )
            self._told[key] = told
        # Should this operator take over later, it starts from what the cluster holds.
        self._applied.pop(key, None)
        self._drift.forget(key)
        self._member_pools.pop(key, None)
        self.autoscaler.forget(*key.split("/", 1))
        metrics.STANDING_BACK.set(len(self._sightings))

    def serves(self, namespace: str, name: str) -> bool:
        """False while another operator release serves the resource (this one stands back)."""
        return f"{namespace}/{name}" not in self._sightings

    def _reconcile(self, body: dict[str, Any], watched_pod: Pod | None) -> float | None:
        seen = self._observe(body, watched_pod)
        if seen is None:
            return None
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        body, ingestion, changed, pod = seen.body, seen.ingestion, seen.changed, seen.driver_pod
        self._apply_children(body, ingestion, seen.first_time, changed)
        placement = (ingestion.status or DeltaIngestionStatus()).placement
        if wants_pool(ingestion.spec, placement) or (
            placement is not None and placement.mode == "pooled"
        ):
            return self._pooled(body, ingestion, pod)

        # Act on at most two plans: a replacement deletes the old driver and, once the API server
        # confirms it is gone, creates the new one in the same pass.
        plan = self._plan(ingestion, pod, changed)
        if plan.action == "create" and (running := self.pools.listed(namespace, name)):
            # A stream deleted while pooled and created again under its name: its old run first.
            log.info("%s/%s: its driver waits: %s", namespace, name, running)
            return POOL_WAIT_SECONDS
        for _ in range(2):
            pod = self._act(body, ingestion, plan, pod)
            if plan.action != "delete" or plan.delete_reason != DeleteReason.SPEC_CHANGED:
                break
            ingestion = ingestion.model_copy(update={"status": self._status(ingestion, plan)})
            plan = self._plan(ingestion, pod, changed)
        status, reading = self._scale(body, ingestion, self._status(ingestion, plan), pod)
        status, recheck_in = self._progress(ingestion, status, pod, reading)
        status = self._group_commit(ingestion, status, pod, reading)
        self._write_status(body, status)
        waits = [w for w in (plan.requeue_after, recheck_in) if w is not None]
        return min(waits) if waits else None

    def _pooled(self, body: dict[str, Any], ingestion: DeltaIngestion, pod: Pod | None) -> float:
        """A stream in a pool, joining one or leaving one (see :mod:`pool_keeper` for the
        handshake: its driver goes before it joins; it leaves once no pool runs it, and its
        status says so before a driver of its own is created, on a later pass). Returns when
        to look again."""
        ns, name = ingestion.namespace, ingestion.name
        # Its status drops the autoscaler's state: a driver of its own later starts afresh.
        self.autoscaler.forget(ns, name)
        previous = ingestion.status or DeltaIngestionStatus()
        placement = previous.placement
        now = datetime.now(UTC)
        report: MemberReport | None = None
        reported_at: float | None = None
        crowded = False
        requeue = POOL_WAIT_SECONDS
        if wants_pool(ingestion.spec, placement):
            if pod is None and (placement is None or placement.mode != "pooled"):
                # Joining: the API server, not the pod watch (which may lag a pod just
                # created), says its driver is gone.
                pod = self.kube.get_pod(ns, driver_pod_name(name))
            if pod is not None:  # its own driver goes first, after its in-flight batch
                if not pod.deleting:
                    self.kube.delete_pod(ns, driver_pod_name(name), uid=pod.uid)
                    metrics.DRIVER_ACTIONS.labels("delete", "pooled").inc()
                verdict = MemberVerdict(
                    False, False, Reason.LEAVING_DRIVER,
                    f"spec.placement is {ingestion.spec.placement}: its driver stops after its "
                    "in-flight batch, then it joins a pool",
                )  # fmt: skip
            else:
                key = f"{ns}/{name}"
                if placement is None or placement.mode != "pooled":
                    placement = _joined(ingestion, placement, now)
                    # A join (from a driver of its own), not a move between pools.
                    self._member_pools.pop(key, None)
                    self.kube.post_event(
                        body, "Normal", EventReason.MOVED_TO_POOL,
                        f"its driver is gone: it joins a pool ({placement.message})",
                    )  # fmt: skip
                    log.info("%s/%s: joins a pool", ns, name)
                view = self.pools.view(ns, name)
                last = self._member_pools.get(key)
                if view.pool is not None:
                    if last is not None and view.pool != last:
                        placement = moved_between_pools(placement, last, view.pool, now)
                        self.kube.post_event(
                            body, "Normal", EventReason.MOVED_TO_POOL, placement.message or ""
                        )
                    self._member_pools[key] = view.pool
                # The last pool stays named while it has none (leaving one for another): a pool
                # that stops reporting holds up the moves of the streams last there only.
                if view.pool is not None and placement.pool != view.pool:
                    placement = placement.model_copy(update={"pool": view.pool})
                report, reported_at = view.report, view.reported_at
                crowded = view.pool_behind
                verdict = member_verdict(
                    view.pool, report, reported_at, time.time(),
                    self.settings.degraded_after_failures,
                    trigger_seconds=trigger_seconds(
                        ingestion.spec, None if report is None else report.freshness
                    ),
                    sighting=view.sighting,
                )  # fmt: skip
                # Waiting for a step to happen: soon. Running or failed: the keeper wakes it when
                # its phase changes.
                waiting = verdict.reason in (Reason.WAITING_FOR_POOL, Reason.STREAM_STARTING)
                requeue = POOL_WAIT_SECONDS if waiting else self.settings.reconcile_interval_seconds
        else:
            why = self.pools.released(ns, name, None if placement is None else placement.pool)
            if why is None:
                said = _left_pool(ingestion, placement)
                self.kube.post_event(body, "Normal", EventReason.MOVED_TO_DRIVER, said)
                log.info("%s/%s: left its pool", ns, name)
                # Out of the pool in its status first: the keeper never pools a stream whose
                # status says otherwise, so a flip back to pooled cannot meet its new driver.
                left = PlacementStatus(
                    mode=driver_mode(ingestion.spec, None), since=now, reason=LEFT_POOL,
                    message=said,
                    # Where auto wants it stays decided (a suspended member rejoins on resume).
                    wanted=None if placement is None else placement.wanted,
                    pending_since=None if placement is None else placement.pending_since,
                    decision=None if placement is None else placement.decision,
                )  # fmt: skip
                self._patch_status(
                    ns, name, {"placement": left.model_dump(by_alias=True, mode="json")}
                )
                self.pools.nudge()
                return POOL_WAIT_SECONDS
            verdict = MemberVerdict(
                False, False, Reason.LEAVING_POOL,
                f"leaving its pool before a driver of its own starts: {why}",
            )  # fmt: skip
        self._write_pooled_status(
            body, ingestion, placement, verdict=verdict, report=report, reported_at=reported_at,
            crowded=crowded,
        )  # fmt: skip
        return requeue

    def _write_pooled_status(
        self,
        body: dict[str, Any],
        ingestion: DeltaIngestion,
        placement: PlacementStatus | None,
        *,
        verdict: MemberVerdict,
        report: MemberReport | None,
        reported_at: float | None,
        crowded: bool = False,
    ) -> None:
        """``crowded``: most of its pool's members miss their targets (the pool is short, not
        this member: being behind moves it nowhere)."""
        now = datetime.now(UTC)
        generation = ingestion.metadata.get("generation")
        previous = ingestion.status or DeltaIngestionStatus()
        conditions = previous.conditions
        for type_, value, reason, message in (
            (ConditionType.READY, verdict.ready, verdict.reason, verdict.message),
            (ConditionType.DEGRADED, verdict.degraded,
             verdict.reason if verdict.degraded else Reason.HEALTHY,
             verdict.message if verdict.degraded else ""),
            (ConditionType.PROGRESSING, not verdict.ready and not verdict.degraded,
             verdict.reason, verdict.message),
            (ConditionType.SUSPENDED, False, Reason.RUNNING, ""),
            (ConditionType.SCALING, False, Reason.MANUAL,
             "a pooled stream is not scaled: it shares its pool's task threads"),
        ):  # fmt: skip
            conditions = set_condition(conditions, type_, value, reason, message, generation, now)
        if verdict.ready and report is not None:
            conditions = group_commit_degraded(
                conditions, report.group_commit_error, generation=generation, now=now
            )
        reporting = (
            reported_at is not None and time.time() - reported_at <= POOL_REPORT_STALE_SECONDS
        )
        fresh = freshness_verdict(
            ingestion.spec,
            None if report is None else report.freshness,
            reporting=reporting,
            lag_seconds=None,
            now=time.time(),
        )
        conditions = set_condition(
            conditions, ConditionType.FRESHNESS, fresh.holds, fresh.reason, fresh.message,
            generation, now,
        )  # fmt: skip
        if placement is not None and placement.mode == "pooled":
            placement = auto_placement(
                ingestion.spec, placement,
                None if report is None or not reporting else report.busy_cores,
                behind(fresh) and _settled(placement, report, now) and not crowded, now,
            )  # fmt: skip
        lag = LagStatus()
        if report is not None and report.lag_records is not None and report.lag_at is not None:
            lag = LagStatus(
                records=report.lag_records,
                measured_at=datetime.fromtimestamp(min(report.lag_at, time.time()), UTC),
            )
        ids = identity(ingestion)
        status = previous.model_copy(
            update={
                "observed_generation": generation,
                "conditions": conditions,
                "placement": placement,
                "driver": DriverStatus(),
                "executors": ExecutorStatus(),
                "lag": lag,
                "freshness": fresh.status,
                "cost": member_cost_status(report, reported_at, time.time()),
                "autoscaler": AutoscalerStatus(),
                "checkpoint_path": ids.checkpoint_path,
                "dead_letter_table_path": ids.dead_letter_table_path,
            }
        )
        self._write_status(body, status)

    def _write_status(self, body: dict[str, Any], status: DeltaIngestionStatus) -> None:
        """Patch the status when it differs from the stored one beyond its figures' stamps
        (``decisions.status``)."""
        document = status_document(status)
        stored = body.get("status") or {}
        if "conditions" in document:
            document["conditions"] = settled_transitions(
                document["conditions"], stored.get("conditions") or []
            )
        now = datetime.now(UTC)
        meta = body["metadata"]
        written = self._status_written.get(f"{meta['namespace']}/{meta['name']}")
        written_ago = None if written is None else time.monotonic() - written
        if status_write_due(strip_nones(document), stored, now, written_ago):
            if renew_with_write(read_claim(stored), self.settings.identity):
                document["operator"] = claim_record(self.settings.identity, now)
            self._patch_status(meta["namespace"], meta["name"], document)
            if _placement_moves(stored.get("placement"), document.get("placement")):
                self.pools.nudge()  # the pool keeper acts on a stream's placement

    def _observe(self, body: dict[str, Any], watched_pod: Pod | None) -> Seen | None:
        """Everything this round decides on, read once (None: nothing to reconcile)."""
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        metrics.RECONCILES.labels(namespace, name).inc()
        try:
            ingestion = DeltaIngestion.model_validate(body)
        except ValidationError as e:
            self._report_invalid(body, describe(e))
            return None
        first_time, changed = self._spec_changes(ingestion)
        pod = (
            self.kube.get_pod(namespace, driver_pod_name(name))
            if watched_pod is UNSEEN
            else watched_pod
        )
        return Seen(body, ingestion, first_time, changed, pod)

    def _apply_children(
        self, body: dict[str, Any], ingestion: DeltaIngestion, first_time: bool, changed: list[str]
    ) -> None:
        """Server-side apply every child when they changed, are new, or are due a resync."""
        key = f"{ingestion.namespace}/{ingestion.name}"
        uid = str(ingestion.metadata.get("uid", ""))
        manifests = children(ingestion, self.settings)
        digest = hashlib.sha256(json.dumps(manifests, sort_keys=True).encode()).hexdigest()
        last = self._applied.get(key)
        now = time.monotonic()
        drifted = self._drift.pending(key)
        if (
            not first_time
            and last is not None
            and last.uid == uid
            and last.children_digest == digest
            and now - last.at < RESYNC_SECONDS
            and (not drifted.children or restore_waits(last.restores, now))
        ):
            return
        versions = {
            child_key(manifest["kind"], manifest["metadata"]["name"]): child_version(
                self.kube.apply(manifest)
            )
            for manifest in manifests
        }
        if last is None:  # this process's first apply: an earlier operator's binding goes
            self._retire_legacy_binding(key, ingestion, uid)
        restored = self._drift.applied(key, drifted, versions)
        restores = () if last is None else last.restores
        if restored:
            restores = restored_at(restores, now)
        self._applied[key] = _Applied(
            uid, ingestion.metadata.get("generation"), digest, now, restores
        )
        if restored and last is not None and last.children_digest == digest:
            said = f"{', '.join(restored)}: changed or deleted outside the operator, applied again"
            log.info("%s: %s", key, said)
            self.kube.post_event(body, "Normal", EventReason.CHILD_RESTORED, said)
        if first_time:
            kinds = ", ".join(f"{m['kind']} {m['metadata']['name']}" for m in manifests)
            self.kube.post_event(body, "Normal", EventReason.RESOURCES_CREATED, f"created {kinds}")
        if changed and not needs_driver_replacement(changed):
            self.kube.post_event(
                body,
                "Normal",
                EventReason.CONFIG_UPDATED,
                f"{', '.join(changed)} changed: applied in place, driver kept",
            )

    def child_seen(
        self, namespace: str, owner: str, kind: str, name: str, version: str | None
    ) -> bool:
        """The watch on the operator's children delivered one of ``owner``'s at ``version``
        (``drift.child_version``; None: deleted). Whether it differs from what this process
        applied, so that the owner's next round applies its children again (the caller wakes
        it)."""
        return self._drift.seen(f"{namespace}/{owner}", child_key(kind, name), version)

    def _retire_legacy_binding(self, key: str, ingestion: DeltaIngestion, uid: str) -> None:
        """Delete the RoleBinding an earlier operator made for the driver's old ServiceAccount
        name (if the stream owns it); see Kube.delete_role_binding for a role that may not."""
        legacy = f"{ingestion.name}{names.LEGACY_DRIVER_IDENTITY_SUFFIX}"
        if self.kube.delete_role_binding(ingestion.namespace, legacy, owner_uid=uid):
            log.info("%s: deleted RoleBinding %s (the driver's earlier identity)", key, legacy)

    def _scale(
        self,
        body: dict[str, Any],
        ingestion: DeltaIngestion,
        status: DeltaIngestionStatus,
        pod: Pod | None,
    ) -> tuple[DeltaIngestionStatus, ReportReading]:
        """One autoscaling round on the driver as observed; its figures go into the status.
        Also returns the driver's report as the round judged it."""
        outcome = self.autoscaler.step(ingestion, pod, time.time())
        for event in outcome.events:
            self.kube.post_event(body, event.type, event.reason, event.message)
        value, reason, message = outcome.condition
        conditions = set_condition(
            status.conditions,
            ConditionType.SCALING,
            value,
            reason,
            message,
            ingestion.metadata.get("generation"),
            datetime.now(UTC),
        )
        now = time.time()
        report = outcome.reading.report
        reporting = report is not None and report.fresh(now)
        fresh = freshness_verdict(
            ingestion.spec,
            None if report is None else report.freshness,
            reporting=reporting,
            lag_seconds=outcome.lag.seconds,
            now=now,
        )
        conditions = set_condition(
            conditions,
            ConditionType.FRESHNESS,
            fresh.holds,
            fresh.reason,
            fresh.message,
            ingestion.metadata.get("generation"),
            datetime.now(UTC),
        )
        status = status.model_copy(
            update={
                "conditions": conditions,
                "executors": outcome.executors,
                "lag": outcome.lag,
                "freshness": fresh.status,
                "cost": cost_status(
                    None if report is None else report.cost, reporting=reporting, now=now
                ),
                "autoscaler": outcome.autoscaler,
                "placement": auto_placement(
                    ingestion.spec,
                    self._place(body, ingestion, outcome, status.driver.consecutive_failures),
                    None if report is None or not reporting else report.busy_cores,
                    behind(fresh),
                    datetime.now(UTC),
                    # Stuck past the pending deadline (Degraded), not a moment's wait for a
                    # node a cluster autoscaler is adding.
                    unplaceable=_degraded_by(status.conditions, Reason.UNSCHEDULABLE),
                ),
            }
        )
        return status, outcome.reading

    def _place(
        self,
        body: dict[str, Any],
        ingestion: DeltaIngestion,
        outcome: ScalingOutcome,
        driver_failures: int,
    ) -> PlacementStatus:
        """Local mode or executor pods, from this round's count (decisions.placement); an Event
        when the stream moves (the next round replaces the driver in the new mode)."""
        previous = (ingestion.status or DeltaIngestionStatus()).placement
        decided = outcome.autoscaler.verdict not in (None, "Unknown", "Idle")
        placement = place(
            ingestion.spec,
            previous,
            outcome.executors.desired if decided else None,
            outcome.autoscaler.reason or "",
            datetime.now(UTC),
            driver_failures=driver_failures,
        )
        if moved(previous, placement):
            reason = (
                EventReason.MOVED_TO_LOCAL_MODE
                if placement.mode == "local"
                else EventReason.MOVED_TO_EXECUTORS
            )
            self.kube.post_event(body, "Normal", reason, placement.message)
            log.info("%s/%s: %s", ingestion.namespace, ingestion.name, placement.message)
        return placement

    def _progress(
        self,
        ingestion: DeltaIngestion,
        status: DeltaIngestionStatus,
        pod: Pod | None,
        reading: ReportReading,
    ) -> tuple[DeltaIngestionStatus, float | None]:
        """A running driver is Ready only while its stream makes progress (see
        :mod:`~deltaflow_operator.decisions.progress`); other verdicts on Ready stand. Also
        returns when to look again if only time can change the verdict."""
        now = datetime.now(UTC)
        key = f"{ingestion.namespace}/{ingestion.name}"
        polled = reading.report.kafka if reading.report is not None else None
        if status.lag.records == 0 and polled is not None:
            # When the driver polled Kafka, not this round: a view is kept up to a minute.
            self._caught_up_at[key] = min(polled.at, now.timestamp())
        ready = condition(status.conditions, ConditionType.READY)
        if ready is None or ready.status != "True" or ready.reason != Reason.STREAMING:
            return status, None
        started = pod.running_since if pod is not None else None
        if pod is None or started is None:
            return status, None
        verdict = stream_progress(
            reading.report,
            running_for=(now - started).total_seconds(),
            lag_records=status.lag.records,
            trigger_seconds=trigger_seconds(
                ingestion.spec, None if reading.report is None else reading.report.freshness
            ),
            now=now.timestamp(),
            refused=reading.refused,
            caught_up_at=self._caught_up_at.get(key),
        )
        conditions = set_condition(
            status.conditions,
            ConditionType.READY,
            verdict.ready,
            verdict.reason,
            verdict.message,
            ingestion.metadata.get("generation"),
            now,
        )
        return status.model_copy(update={"conditions": conditions}), verdict.recheck_in

    def _group_commit(
        self,
        ingestion: DeltaIngestion,
        status: DeltaIngestionStatus,
        pod: Pod | None,
        reading: ReportReading,
    ) -> DeltaIngestionStatus:
        """Degraded says so when a Ready stream's driver, running and reporting, may not commit
        to its consumer group (see :func:`group_commit_degraded`)."""
        now = datetime.now(UTC)
        report = reading.report
        ready = condition(status.conditions, ConditionType.READY)
        if (
            report is None
            or not report.fresh(now.timestamp())
            or pod is None
            or not pod.running
            or ready is None
            or ready.status != "True"
        ):
            return status
        conditions = group_commit_degraded(
            status.conditions,
            report.group_commit_error,
            generation=ingestion.metadata.get("generation"),
            now=now,
        )
        return status.model_copy(update={"conditions": conditions})

    def _spec_changes(self, ingestion: DeltaIngestion) -> tuple[bool, list[str]]:
        """(first reconcile?, spec fields changed since the config the driver was given).

        The stored config is read only when the generation moved since this process applied
        it: the spec is all it depends on."""
        last = self._applied.get(f"{ingestion.namespace}/{ingestion.name}")
        if (
            last is not None
            and last.uid == str(ingestion.metadata.get("uid", ""))
            and last.generation == ingestion.metadata.get("generation")
        ):
            return False, []
        stored = self.kube.get_config_map(ingestion.namespace, config_map_name(ingestion.name))
        if stored is None:
            return True, []
        old = yaml.safe_load((stored.get("data") or {}).get("ingestion.yaml", "")) or {}
        new = driver_builders.pipeline_document(ingestion)
        return False, changed_fields(old.get("spec", {}), new["spec"])

    def _plan(self, ingestion: DeltaIngestion, pod: Pod | None, changed: list[str]) -> DriverPlan:
        replacing = [f for f in changed if needs_driver_replacement([f])]
        mode = driver_builders.driver_pod_mode(ingestion)
        running = pod.annotations.get(SPARK_MODE_ANNOTATION) if pod is not None else None
        if running is not None and running != mode:
            # Named in the replacement's words (decisions.placement moved the stream).
            replacing.append(f"status.placement ({running} -> {mode})")
        observed = Observed(
            ingestion=ingestion,
            driver_pod=pod,
            desired_hash=driver_builders.driver_spec_hash(ingestion, self.settings),
            changed_fields=replacing,
            now=datetime.now(UTC),
        )
        return decide_driver(observed, self.settings)

    def _act(
        self,
        body: dict[str, Any],
        ingestion: DeltaIngestion,
        plan: DriverPlan,
        pod: Pod | None,
    ) -> Pod | None:
        """Carry out the plan; return the driver pod as it is afterwards."""
        ns, pod_name = ingestion.namespace, driver_pod_name(ingestion.name)
        after = pod
        if plan.action == "delete" and pod is not None:
            self.kube.delete_pod(ns, pod_name, uid=pod.uid)
            metrics.DRIVER_ACTIONS.labels("delete", str(plan.delete_reason)).inc()
            after = self.kube.get_pod(ns, pod_name)  # gone at once, or terminating
        elif plan.action == "create":
            # Its Spark secret first (made once; one there already is kept as it is).
            self.kube.create_secret(driver_builders.spark_auth_secret(ingestion))
            if not self.kube.create_pod(driver_builders.driver_pod(ingestion, self.settings)):
                # It exists: the pod watch had not delivered it yet. Nothing was started.
                return self.kube.get_pod(ns, pod_name)
            metrics.DRIVER_ACTIONS.labels("create", "start").inc()
            after = self.kube.get_pod(ns, pod_name)
        for event in plan.events:
            self.kube.post_event(body, event.type, event.reason, event.message)
        return after

    def _status(self, ingestion: DeltaIngestion, plan: DriverPlan) -> DeltaIngestionStatus:
        ids = identity(ingestion)
        previous = ingestion.status or DeltaIngestionStatus()
        return previous.model_copy(
            update={
                "observed_generation": ingestion.metadata.get("generation"),
                "conditions": plan.conditions,
                "driver": plan.driver,
                "checkpoint_path": ids.checkpoint_path,
                "dead_letter_table_path": ids.dead_letter_table_path,
            }
        )

    def _report_failure(self, namespace: str, name: str, error: Exception) -> None:
        """A reconcile that failed says so in the status: a Ready=True from an earlier round
        must not stand while the operator cannot act (kopf retries the reconcile)."""
        try:
            body = self.kube.get_ingestion(namespace, name)
            if body is None or body["metadata"].get("deletionTimestamp"):
                return
            metrics.RECONCILE_ERRORS.labels(namespace, name).inc()
            current = DeltaIngestionStatus.model_validate(body.get("status") or {})
            message = f"the operator could not reconcile this resource: {_short(error)}"
            now = datetime.now(UTC)
            generation = body["metadata"].get("generation")
            failed = Reason.RECONCILE_FAILED
            conditions = set_condition(
                current.conditions, ConditionType.READY, False, failed, message, generation, now
            )
            conditions = set_condition(
                conditions, ConditionType.PROGRESSING, True, failed, message, generation, now
            )
            self._patch_status(
                namespace,
                name,
                {
                    "conditions": [
                        c.model_dump(by_alias=True, mode="json", exclude_none=True)
                        for c in conditions
                    ]
                },
            )
            self.kube.post_event(body, "Warning", EventReason.RECONCILE_FAILED, message)
        except Exception as report_error:  # the API server may be what failed
            log.warning(
                "could not report the failed reconcile of %s/%s: %s", namespace, name, report_error
            )

    def _report_invalid(self, body: dict[str, Any], problems: list[str]) -> None:
        # The CRD's schema should have stopped this; it can still happen after an operator
        # upgrade tightens a rule. Say exactly what to fix, and touch nothing.
        now = datetime.now(UTC)
        generation = body["metadata"].get("generation")
        message = "; ".join(problems)
        invalid = Reason.INVALID_SPEC
        conditions = set_condition(
            [], ConditionType.READY, False, invalid, message, generation, now
        )
        conditions = set_condition(
            conditions, ConditionType.DEGRADED, True, invalid, message, generation, now
        )
        status = {
            "observedGeneration": generation,
            "conditions": [
                c.model_dump(by_alias=True, mode="json", exclude_none=True) for c in conditions
            ],
        }
        meta = body["metadata"]
        self._patch_status(meta["namespace"], meta["name"], status)
        self.kube.post_event(body, "Warning", EventReason.INVALID_SPEC, message)

    def finalize(self, namespace: str, name: str) -> None:
        """On deletion: stop the driver first (its executors follow); GC removes the rest.

        The table and the checkpoint are never touched: deleting the resource stops ingesting,
        it does not delete data. Another release that serves the resource stops its driver:
        this one waits for that (kopf removes the finalizer both share once both are done),
        and acts itself only if the owner's claim has expired or the driver outlives a minute.
        """
        key = f"{namespace}/{name}"
        body = self.kube.get_ingestion(namespace, name)
        if body is not None and self._ownership(key, body).action == "stand_back":
            if self._wait_driver_gone(namespace, name, FINALIZE_WAIT_SECONDS):
                self._forget(namespace, name)
                return
            log.warning(
                "%s: its operator did not stop the driver in %.0fs: stopping it",
                key,
                FINALIZE_WAIT_SECONDS,
            )
        self._forget(namespace, name)
        pod = self.kube.get_pod(namespace, driver_pod_name(name))
        if pod is not None:
            self.kube.delete_pod(namespace, driver_pod_name(name), uid=pod.uid)
            metrics.DRIVER_ACTIONS.labels("delete", str(DeleteReason.RESOURCE_DELETED)).inc()

    def _wait_driver_gone(self, namespace: str, name: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self.kube.get_pod(namespace, driver_pod_name(name)) is not None:
            if time.monotonic() > deadline:
                return False
            time.sleep(2)
        return True

    def _forget(self, namespace: str, name: str) -> None:
        key = f"{namespace}/{name}"
        self.autoscaler.forget(namespace, name)
        self._applied.pop(key, None)
        self._drift.forget(key)
        self._sightings.pop(key, None)
        self._told.pop(key, None)
        self._versions.pop(key, None)
        self._status_written.pop(key, None)
        self._caught_up_at.pop(key, None)
        self._member_pools.pop(key, None)
        metrics.STANDING_BACK.set(len(self._sightings))
        metrics.forget_resource(namespace, name)


def status_document(status: DeltaIngestionStatus) -> dict[str, Any]:
    """The status as a merge patch: what became unknown or was cleared (a measured figure, a
    placement's pool, auto's pending move) is an explicit null, which deletes the stored field;
    left out, it would linger as if current."""
    document = status.model_dump(by_alias=True, mode="json", exclude_none=True)
    for key in ("driver", "lag", "executors", "autoscaler", "cost", "placement"):
        part = getattr(status, key)
        if part is not None:
            document[key] = part.model_dump(by_alias=True, mode="json")
    return document


def _placement_moves(stored: Any, written: Any) -> bool:
    """Whether a status write changed where the stream runs or where auto wants it."""
    before = stored if isinstance(stored, dict) else {}
    after = written if isinstance(written, dict) else {}
    return any(before.get(k) != after.get(k) for k in ("mode", "wanted"))


def _degraded_by(conditions: list[Condition], reason: Reason) -> bool:
    found = condition(conditions, ConditionType.DEGRADED)
    return found is not None and found.status == "True" and found.reason == reason


def _settled(placement: PlacementStatus, report: MemberReport | None, now: datetime) -> bool:
    """Whether a member's freshness window holds only records since it joined its pool: before,
    the records that waited for the move itself would read as a pool falling behind."""
    window = report.freshness.window_seconds if report and report.freshness else 0.0
    return placement.since is None or (now - placement.since).total_seconds() >= window


def _left_pool(ingestion: DeltaIngestion, placement: PlacementStatus | None) -> str:
    """What a stream that left its pool is told (its Event and status.placement)."""
    spec = ingestion.spec
    if spec.suspend:
        rejoins = wants_pool(spec.model_copy(update={"suspend": False}), placement)
        return "suspended: no pool runs it any more " + (
            "(it joins one again when resumed)"
            if rejoins
            else "(it gets a driver of its own once resumed)"
        )
    why = placement.decision if placement is not None and spec.placement == "auto" else None
    return "no pool runs it any more: it gets a driver of its own" + (f" ({why})" if why else "")


def _joined(
    ingestion: DeltaIngestion, placement: PlacementStatus | None, now: datetime
) -> PlacementStatus:
    """status.placement of a stream whose driver is gone as it joins a pool."""
    if ingestion.spec.placement == "auto":
        why = (placement.decision if placement is not None else None) or (
            "a new stream starts in a pool until its load is measured"
        )
        return PlacementStatus(
            mode="pooled", since=now, reason=AUTO_PLACEMENT,
            message=f"spec.placement is auto: {why}", wanted="pooled", decision=why,
        )  # fmt: skip
    return PlacementStatus(
        mode="pooled", since=now, reason=POOLED_BY_SPEC,
        message="spec.placement is pooled: it runs in a pool driver with the other small "
        "streams of its namespace and object store",
    )  # fmt: skip


def _short(error: Exception) -> str:
    """An exception as one line a user can act on (an API error's message, not its headers)."""
    body = getattr(error, "body", None)
    if body:
        try:
            return str(json.loads(body).get("message") or body)[:500]
        except (ValueError, AttributeError):
            return str(body)[:500]
    return f"{type(error).__name__}: {error}"[:500]
