"""Operator settings, read from the environment once at start (the Helm chart sets them)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Settings:
    """What the operator needs to know beyond each DeltaIngestion."""

    image: str = "ghcr.io/deltaflow/deltaflow:0.1.0"
    image_pull_policy: str = "IfNotPresent"
    namespace: str = "deltaflow-system"  # where the operator's leader-election Lease lives
    lease_name: str = "deltaflow-operator"
    watch_namespaces: tuple[str, ...] = ()  # empty: every namespace
    # The chart's ClusterRole each driver's RoleBinding grants (the operator may only bind it).
    driver_cluster_role: str = "deltaflow-operator-driver"
    metrics_port: int = 8000
    health_port: int = 8080
    reconcile_interval_seconds: float = 60.0
    backoff_base_seconds: float = 10.0
    backoff_max_seconds: float = 300.0
    degraded_after_failures: int = 3
    # A driver pod not running (or not gone) this long after it should be makes it Degraded.
    driver_pending_deadline_seconds: float = 120.0
    runtime_metrics_port: int = 8090
    # Who may scrape a driver's metrics port (builders.network_policy): a JSON list of
    # NetworkPolicyPeers, the chart's networkPolicy.metricsFrom; empty: anyone.
    driver_metrics_from: str = ""
    # Another release's claim on a resource (decisions.ownership): renewed this often by its
    # owner, taken over after this long unchanged (a release removed hands its streams over).
    ownership_renew_seconds: float = 300.0
    ownership_expire_seconds: float = 900.0
    # Stream pools (spec.placement: pooled): members per pool at most, a pool pod's task threads
    # (Spark local[N]) and heap, and the chart's ClusterRole each pool's RoleBinding grants.
    pool_members: int = 20
    pool_cores: int = 1
    pool_core_request: str | None = None  # the pod's CPU request when not pool_cores
    pool_memory: str = "2g"
    pool_cluster_role: str = "deltaflow-operator-pool"

    @property
    def identity(self) -> str:
        """This release as ``status.operator`` names it: its replicas share it."""
        return f"{self.namespace}/{self.lease_name}"

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        """Settings from ``DELTAFLOW_*`` environment variables, defaults for the rest."""
        e = dict(os.environ if env is None else env)
        d = cls()
        return cls(
            image=e.get("DELTAFLOW_IMAGE", d.image),
            image_pull_policy=e.get("DELTAFLOW_IMAGE_PULL_POLICY", d.image_pull_policy),
            namespace=e.get("DELTAFLOW_NAMESPACE", d.namespace),
            lease_name=e.get("DELTAFLOW_LEASE_NAME", d.lease_name),
            watch_namespaces=tuple(
                n.strip() for n in e.get("DELTAFLOW_WATCH_NAMESPACES", "").split(",") if n.strip()
            ),
            driver_cluster_role=e.get("DELTAFLOW_DRIVER_CLUSTER_ROLE", d.driver_cluster_role),
            metrics_port=int(e.get("DELTAFLOW_METRICS_PORT", d.metrics_port)),
            health_port=int(e.get("DELTAFLOW_HEALTH_PORT", d.health_port)),
            reconcile_interval_seconds=float(
                e.get("DELTAFLOW_RECONCILE_INTERVAL_SECONDS", d.reconcile_interval_seconds)
            ),
            backoff_base_seconds=float(
                e.get("DELTAFLOW_BACKOFF_BASE_SECONDS", d.backoff_base_seconds)
            ),
            backoff_max_seconds=float(
                e.get("DELTAFLOW_BACKOFF_MAX_SECONDS", d.backoff_max_seconds)
            ),
            degraded_after_failures=int(
                e.get("DELTAFLOW_DEGRADED_AFTER_FAILURES", d.degraded_after_failures)
            ),
            driver_pending_deadline_seconds=float(
                e.get(
                    "DELTAFLOW_DRIVER_PENDING_DEADLINE_SECONDS", d.driver_pending_deadline_seconds
                )
            ),
            driver_metrics_from=_peers(e.get("DELTAFLOW_DRIVER_METRICS_FROM", "")),
            ownership_renew_seconds=float(
                e.get("DELTAFLOW_OWNERSHIP_RENEW_SECONDS", d.ownership_renew_seconds)
            ),
            ownership_expire_seconds=float(
                e.get("DELTAFLOW_OWNERSHIP_EXPIRE_SECONDS", d.ownership_expire_seconds)
            ),
            pool_members=int(e.get("DELTAFLOW_POOL_MEMBERS", d.pool_members)),
            pool_cores=int(e.get("DELTAFLOW_POOL_CORES", d.pool_cores)),
            pool_core_request=e.get("DELTAFLOW_POOL_CORE_REQUEST") or d.pool_core_request,
            pool_memory=e.get("DELTAFLOW_POOL_MEMORY", d.pool_memory),
            pool_cluster_role=e.get("DELTAFLOW_POOL_CLUSTER_ROLE", d.pool_cluster_role),
        )


def _peers(text: str) -> str:
    """``text`` as a canonical JSON list of objects ("" for none); a ValueError says what is
    wrong, so a mistake stops the operator at start rather than on the first policy it applies."""
    if not text.strip():
        return ""
    peers = json.loads(text)
    if not isinstance(peers, list) or not all(isinstance(p, dict) for p in peers):
        raise ValueError(
            f"DELTAFLOW_DRIVER_METRICS_FROM must be a JSON list of NetworkPolicyPeers: {text!r}"
        )
    return json.dumps(peers, sort_keys=True) if peers else ""
