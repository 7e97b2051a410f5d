"""The one module that talks to the Kubernetes API (apart from kopf's own watching).

Everything else in the operator works on plain dicts and pydantic models; this module turns those
into API calls: server-side apply of children, the driver pod's life, status,
Events and the leader-election Lease.

Every call is a typed client method (``<verb>_namespaced_<kind>``) or the dynamic client's
server-side apply of a child: tests/unit/test_rbac.py reads the calls from this file and checks
that the chart's roles grant exactly what they need.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar, cast

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import DynamicApiError

from deltaflow_api import GROUP, PLURAL, VERSION
from deltaflow_api.reasons import EventReason
from deltaflow_operator.decisions.pod import Pod

FIELD_MANAGER = "deltaflow-operator"
T = TypeVar("T")
log = logging.getLogger(__name__)

# Every call ends: (connect, read) seconds. A hung API server, or a network that drops packets,
# must not hold a reconcile or the pool keeper for ever.
API_TIMEOUT = (5.0, 30.0)
# A Lease call that hangs gives way to the next try well within the renew deadline.
LEASE_API_TIMEOUT = (2.0, 3.0)


def timed(api_client: client.ApiClient, timeout: tuple[float, float]) -> client.ApiClient:
    """``api_client`` with ``timeout`` on every request that sets none of its own (the client's
    default is to wait for ever)."""
    rest: Any = api_client.rest_client
    request: Callable[..., Any] = rest.request

    def with_timeout(*args: Any, _request_timeout: Any = None, **kwargs: Any) -> Any:
        return request(*args, _request_timeout=_request_timeout or timeout, **kwargs)

    rest.request = with_timeout
    return api_client


def _unless_missing(call: Callable[[], T]) -> T | None:
    """``call()``, or None when the API server answers 404 (the object does not exist)."""
    try:
        return call()
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def load_config() -> None:
    """In-cluster credentials when running in a pod, else the kubeconfig (KUBECONFIG)."""
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()


class Kube:
    """A thin, typed facade over the API calls the operator makes."""

    def __init__(self, api_client: client.ApiClient | None = None) -> None:
        self.api_client = timed(api_client or client.ApiClient(), API_TIMEOUT)
        self.core = client.CoreV1Api(self.api_client)
        self.custom = client.CustomObjectsApi(self.api_client)
        self.rbac = client.RbacAuthorizationV1Api(self.api_client)
        self._dynamic: DynamicClient | None = None
        self._dynamic_lock = threading.Lock()

    @property
    def dynamic(self) -> DynamicClient:
        """Discovery-backed client for server-side apply of any kind (discovered once, lazily)."""
        with self._dynamic_lock:
            if self._dynamic is None:
                self._dynamic = DynamicClient(self.api_client)
            return self._dynamic

    def _plain(self, obj: Any) -> dict[str, Any]:
        out: dict[str, Any] = self.api_client.sanitize_for_serialization(obj)
        return out

    # --- DeltaIngestion -------------------------------------------------------------------
    def get_ingestion(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The DeltaIngestion as stored, or None if it is gone."""
        return _unless_missing(
            lambda: cast(
                dict[str, Any],
                self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name),
            )
        )

    def list_ingestions(self, namespaces: tuple[str, ...]) -> list[dict[str, Any]]:
        """Every DeltaIngestion in ``namespaces`` (empty: in every namespace)."""
        if not namespaces:
            listed = self.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)
            return list(cast(dict[str, Any], listed)["items"])
        items: list[dict[str, Any]] = []
        for namespace in namespaces:
            listed = self.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
            items += cast(dict[str, Any], listed)["items"]
        return items

    def patch_status(self, namespace: str, name: str, status: dict[str, Any]) -> str | None:
        """Merge-patch the status subresource (lists such as conditions are replaced whole);
        the resource's version after it (None: gone)."""
        try:
            stored = self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, PLURAL, name, {"status": status}
            )
        except ApiException as e:
            if e.status != 404:  # deleted meanwhile: nothing to report on
                raise
            return None
        return str(cast(dict[str, Any], stored)["metadata"]["resourceVersion"])

    def claim(
        self, namespace: str, name: str, resource_version: str, operator: dict[str, Any]
    ) -> dict[str, Any] | None:
        """Write ``status.operator`` only if the resource is still at ``resource_version`` (a
        compare-and-swap: of two operators claiming at once, one wins). Returns the resource as
        stored after the write, or None when it changed meanwhile (or is gone)."""
        patch = {
            "metadata": {"resourceVersion": resource_version},
            "status": {"operator": operator},
        }
        try:
            return cast(
                dict[str, Any],
                self.custom.patch_namespaced_custom_object_status(
                    GROUP, VERSION, namespace, PLURAL, name, patch
                ),
            )
        except ApiException as e:
            if e.status in (404, 409):
                return None
            raise

    # --- children -------------------------------------------------------------------------
    def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply ``manifest`` as the operator's field manager; returns the object."""
        resource = self.dynamic.resources.get(
            api_version=manifest["apiVersion"], kind=manifest["kind"]
        )
        namespace = manifest["metadata"].get("namespace")

        def apply() -> Any:
            return self.dynamic.server_side_apply(
                resource,
                body=manifest,
                namespace=namespace,
                field_manager=FIELD_MANAGER,
                force_conflicts=True,
            )

        try:
            result = apply()
        except DynamicApiError as e:
            # A RoleBinding's roleRef cannot change (older versions bound a per-stream Role; a
            # release of another name binds its own driver ClusterRole): replace the binding,
            # which the driver holds only while it lists or creates pods.
            if e.status != 422 or manifest["kind"] != "RoleBinding":
                raise
            self.delete_role_binding(namespace, manifest["metadata"]["name"])
            result = apply()
        applied: dict[str, Any] = result.to_dict()
        return applied

    def delete_role_binding(self, namespace: str, name: str, owner_uid: str | None = None) -> bool:
        """Delete the RoleBinding (only if ``owner_uid`` owns it, when given); False if there
        was none to delete, or (with ``owner_uid``: a clean-up, never needed to run a stream)
        when the operator's role does not allow it, which is logged."""
        try:
            return self._delete_role_binding(namespace, name, owner_uid)
        except ApiException as e:
            if e.status != 403 or owner_uid is None:
                raise
            log.warning("not allowed to retire RoleBinding %s/%s: %s", namespace, name, e.reason)
            return False

    def _delete_role_binding(self, namespace: str, name: str, owner_uid: str | None) -> bool:
        if owner_uid is not None:
            body = _unless_missing(
                lambda: self._plain(self.rbac.read_namespaced_role_binding(name, namespace))
            )
            owners = [] if body is None else body["metadata"].get("ownerReferences") or []
            if not any(o.get("uid") == owner_uid for o in owners):
                return False
            uid = body["metadata"]["uid"] if body else None
            options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid))
        else:
            options = client.V1DeleteOptions()
        return (
            _unless_missing(
                lambda: self.rbac.delete_namespaced_role_binding(name, namespace, body=options)
            )
            is not None
        )

    def get_pod(self, namespace: str, name: str) -> Pod | None:
        """The pod as stored, or None."""
        body = _unless_missing(lambda: self._plain(self.core.read_namespaced_pod(name, namespace)))
        return None if body is None else Pod.of(body)

    def create_pod(self, manifest: dict[str, Any]) -> bool:
        """Create the pod; False if one with that name already exists (never a second driver)."""
        try:
            # The client serializes a plain dict as is; its stubs only name the model class.
            self.core.create_namespaced_pod(manifest["metadata"]["namespace"], cast(Any, manifest))
        except ApiException as e:
            if e.status == 409:
                return False
            raise
        return True

    def create_secret(self, manifest: dict[str, Any]) -> bool:
        """Create the Secret; False if one of its name exists (it is then left as it is: the
        operator may create Secrets, never read or change one)."""
        try:
            self.core.create_namespaced_secret(
                manifest["metadata"]["namespace"], cast(Any, manifest)
            )
        except ApiException as e:
            if e.status == 409:
                return False
            raise
        return True

    def delete_pod(self, namespace: str, name: str, uid: str | None = None) -> None:
        """Delete the pod (only that incarnation when ``uid`` is given); a missing pod is fine."""
        preconditions = client.V1Preconditions(uid=uid) if uid else None
        try:
            self.core.delete_namespaced_pod(
                name, namespace, body=client.V1DeleteOptions(preconditions=preconditions)
            )
        except ApiException as e:
            if e.status not in (404, 409):
                raise

    def get_config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The ConfigMap as stored, or None."""
        return _unless_missing(
            lambda: self._plain(self.core.read_namespaced_config_map(name, namespace))
        )

    def list_pods(self, namespaces: tuple[str, ...], selector: str) -> list[dict[str, Any]]:
        """The pods matching the label ``selector`` in ``namespaces`` (empty: everywhere)."""
        if not namespaces:
            listed = self.core.list_pod_for_all_namespaces(label_selector=selector)
            return [self._plain(p) for p in listed.items]
        return [
            self._plain(p)
            for namespace in namespaces
            for p in self.core.list_namespaced_pod(namespace, label_selector=selector).items
        ]

    def list_config_maps(self, namespaces: tuple[str, ...], selector: str) -> list[dict[str, Any]]:
        """The ConfigMaps matching the label ``selector`` in ``namespaces`` (empty: everywhere)."""
        if not namespaces:
            listed = self.core.list_config_map_for_all_namespaces(label_selector=selector)
            return [self._plain(c) for c in listed.items]
        return [
            self._plain(c)
            for namespace in namespaces
            for c in self.core.list_namespaced_config_map(namespace, label_selector=selector).items
        ]

    def delete_config_map(self, namespace: str, name: str) -> None:
        """Delete the ConfigMap (what it owns goes with it); a missing one is fine."""
        _unless_missing(lambda: self.core.delete_namespaced_config_map(name, namespace))

    def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        """Merge ``annotations`` into the pod's (the autoscaling channel to the driver)."""
        try:
            self.core.patch_namespaced_pod(
                name, namespace, {"metadata": {"annotations": annotations}}
            )
        except ApiException as e:
            if e.status != 404:  # the driver went away meanwhile: the next round sees it
                raise

    def post_event(
        self,
        involved: dict[str, Any],
        type_: Literal["Normal", "Warning"],
        reason: EventReason,
        message: str,
    ) -> None:
        """Record an Event on ``involved`` (shown by ``kubectl describe``)."""
        meta = involved["metadata"]
        now = datetime.now(UTC)
        event = client.CoreV1Event(
            metadata=client.V1ObjectMeta(
                generate_name=f"{meta['name']}.", namespace=meta["namespace"]
            ),
            involved_object=client.V1ObjectReference(
                api_version=involved.get("apiVersion", f"{GROUP}/{VERSION}"),
                kind=involved.get("kind", "DeltaIngestion"),
                name=meta["name"],
                namespace=meta["namespace"],
                uid=meta.get("uid"),
                resource_version=meta.get("resourceVersion"),
            ),
            type=type_,
            reason=str(reason),
            message=message[:1024],
            source=client.V1EventSource(component=FIELD_MANAGER),
            reporting_component=FIELD_MANAGER,
            reporting_instance=socket.gethostname(),
            first_timestamp=now,
            last_timestamp=now,
            count=1,
        )
        try:
            self.core.create_namespaced_event(meta["namespace"], event)
        except ApiException as e:  # an Event is best effort: never fail a reconcile over one
            log.warning("could not post event %s on %s: %s", reason, meta["name"], e.reason)


def release_lease(namespace: str, name: str, identity: str) -> bool:
    """Give the Lease up if ``identity`` still holds it, so a standby leads within its next retry
    instead of waiting for the lease to expire (as client-go's ReleaseOnCancel does).

    Call only once this process has stopped acting. Returns whether it was released.
    """
    api = client.CoordinationV1Api(timed(client.ApiClient(), LEASE_API_TIMEOUT))
    lease = _unless_missing(lambda: api.read_namespaced_lease(name, namespace))
    if lease is None or lease.spec is None or lease.spec.holder_identity != identity:
        return False
    spec = lease.spec
    spec.holder_identity = ""
    spec.lease_duration_seconds = 1
    spec.renew_time = datetime.now(UTC)
    try:  # the resourceVersion in `lease` makes this a compare-and-swap
        api.replace_namespaced_lease(name, namespace, lease)
    except ApiException as e:
        log.warning("could not release lease %s/%s: %s", namespace, name, e.reason)
        return False
    return True


def start_leader_election(
    namespace: str,
    name: str,
    on_started: Callable[[], None],
    on_stopped: Callable[[], None],
    lease_seconds: int = 15,
) -> str:
    """Campaign for the Lease ``namespace/name`` in a background thread; returns the identity.

    ``on_started`` runs once this process leads; ``on_stopped`` runs (once) if it ever loses the
    Lease, the caller must then stop acting. That is also so when renewals stop succeeding for
    the renew deadline, whatever the calls are doing (a watchdog, by this process's clock): a
    standby takes the Lease only ``lease_seconds`` after it last saw it change, so the leader
    stops at least ``lease_seconds - renew_deadline`` before another can lead.
    """
    from kubernetes.leaderelection import electionconfig, leaderelection

    identity = f"{os.environ.get('HOSTNAME', socket.gethostname())}-{uuid.uuid4().hex[:6]}"
    lock = _lease_lock(name, namespace, identity)
    renew_deadline = max(2, lease_seconds * 2 // 3)
    leading, stopped = threading.Event(), threading.Event()

    def started() -> None:
        leading.set()
        on_started()

    def stop_leading() -> None:
        if not stopped.is_set():
            stopped.set()
            on_stopped()

    def watch_renewals() -> None:
        while not stopped.wait(0.5):
            written = lock.written_at
            if leading.is_set() and written is not None:
                late = time.monotonic() - written
                if late > renew_deadline:
                    log.error(
                        "the Lease was last renewed %.1f s ago (deadline %d s): stopping before "
                        "it can pass to another replica", late, renew_deadline,
                    )  # fmt: skip
                    stop_leading()

    election = leaderelection.LeaderElection(
        electionconfig.Config(
            lock,
            lease_duration=lease_seconds,
            renew_deadline=renew_deadline,
            retry_period=max(1, lease_seconds // 5),
            onstarted_leading=started,
            onstopped_leading=stop_leading,
        )
    )

    def campaign() -> None:
        try:
            election.run()
        except Exception:
            log.exception("the leader election failed")
        finally:  # whatever ended it, this process no longer leads (or never will)
            stop_leading()

    threading.Thread(target=campaign, name="leader-election", daemon=True).start()
    threading.Thread(target=watch_renewals, name="lease-watchdog", daemon=True).start()
    log.info("campaigning for lease %s/%s as %s", namespace, name, identity)
    return identity


def _lease_lock(name: str, namespace: str, identity: str) -> Any:
    """The client's Lease lock with every call timed (LEASE_API_TIMEOUT), a transport error
    counted as a failed try (the client's lock lets one end the election thread unseen, with
    nobody told to stop acting), and ``written_at``: when it last wrote the Lease."""
    import urllib3
    from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

    class TimedLeaseLock(LeaseLock):
        written_at: float | None = None

        def get(self, name: str, namespace: str) -> tuple[bool, Any]:
            try:
                return cast(tuple[bool, Any], super().get(name, namespace))
            except (urllib3.exceptions.HTTPError, OSError) as e:
                log.warning("reading the Lease failed: %s", e)
                return False, e

        # The election calls these by keyword: the client's parameter names.
        def create(self, name: str, namespace: str, election_record: Any) -> bool:
            return self._written(lambda: LeaseLock.create(self, name, namespace, election_record))

        def update(self, name: str, namespace: str, updated_record: Any) -> bool:
            return self._written(lambda: LeaseLock.update(self, name, namespace, updated_record))

        def _written(self, write: Callable[[], bool]) -> bool:
            try:
                ok = bool(write())
            except (urllib3.exceptions.HTTPError, OSError) as e:
                log.warning("writing the Lease failed: %s", e)
                return False
            if ok:
                self.written_at = time.monotonic()
            return ok

    lock = TimedLeaseLock(name, namespace, identity)
    lock.api_instance = client.CoordinationV1Api(timed(client.ApiClient(), LEASE_API_TIMEOUT))
    return lock
