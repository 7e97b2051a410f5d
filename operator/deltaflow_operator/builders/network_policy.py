"""NetworkPolicies that keep strangers away from a stream's pods.

Spark's authentication (``driver.NETWORK_CONF``) refuses a peer without the application's secret;
these policies make sure other pods cannot even connect, where the cluster's network enforces
NetworkPolicies. Ingress only:

- the driver accepts Spark's RPC and block-manager ports from the stream's own executors, and
  its metrics port from the scrapers the operator is told of (``Settings.driver_metrics_from``;
  anyone when none are named: the figures are no secret);
- an executor accepts its block-manager port from its driver and the stream's other executors
  (block fetches and decommission migration); executors open no other port;
- maintenance job pods (Spark in local mode) accept nothing.

Egress stays open: the brokers, the object store and the API server are addresses outside the
cluster or behind a Service IP that policies match differently on each network plugin, and the
Kafka brokers a client ends up at are only known at run time (the bootstrap servers hand them out).
Nothing reaches the driver through the operator: the scaling channel is the driver pod's
annotations, through the API server.
"""

from __future__ import annotations

import json
from typing import Any

from deltaflow_api import DeltaIngestion
from deltaflow_api.driver_pod import BLOCK_MANAGER_PORT, DRIVER_PORT
from deltaflow_api.names import DNS_SUBDOMAIN, ChildName
from deltaflow_operator.builders.common import Manifest, labels, metadata
from deltaflow_operator.builders.maintenance import JOBS
from deltaflow_operator.settings import Settings

DRIVER_POLICY = ChildName("driver NetworkPolicy", "-driver", DNS_SUBDOMAIN)
EXECUTORS_POLICY = ChildName("executors NetworkPolicy", "-executors", DNS_SUBDOMAIN)
MAINTENANCE_POLICY = ChildName("maintenance NetworkPolicy", "-maintenance", DNS_SUBDOMAIN)
COMPONENT = "app.kubernetes.io/component"
MAINTENANCE_COMPONENTS = tuple(f"maintenance-{job}" for job in JOBS)  # as maintenance.py labels


def tcp_ports(*ports: int) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": p} for p in ports]


def _peer(ingestion: DeltaIngestion, component: str) -> dict[str, Any]:
    """The stream's own pods of one role (a pod of another namespace never matches)."""
    return {"podSelector": {"matchLabels": labels(ingestion, component)}}


def _policy(
    ingestion: DeltaIngestion,
    name: ChildName,
    selector: dict[str, Any],
    ingress: list[dict[str, Any]],
) -> Manifest:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(ingestion, name.of(ingestion.name), "network-policy"),
        "spec": {"podSelector": selector, "policyTypes": ["Ingress"], "ingress": ingress},
    }


def metrics_peers(settings: Settings) -> list[dict[str, Any]]:
    """Who may scrape a driver's metrics (NetworkPolicyPeers); empty: anyone."""
    if not settings.driver_metrics_from:
        return []
    peers = json.loads(settings.driver_metrics_from)
    return [dict(p) for p in peers]


def driver_policy(ingestion: DeltaIngestion, settings: Settings) -> Manifest:
    """Spark's ports from the stream's executors; the metrics port from the scrapers."""
    metrics: dict[str, Any] = {"ports": tcp_ports(settings.runtime_metrics_port)}
    if peers := metrics_peers(settings):
        metrics["from"] = peers
    return _policy(
        ingestion,
        DRIVER_POLICY,
        {"matchLabels": labels(ingestion, "driver")},
        [
            {
                "from": [_peer(ingestion, "executor")],
                "ports": tcp_ports(DRIVER_PORT, BLOCK_MANAGER_PORT),
            },
            metrics,
        ],
    )


def executors_policy(ingestion: DeltaIngestion) -> Manifest:
    """The block-manager port from the stream's driver and executors."""
    return _policy(
        ingestion,
        EXECUTORS_POLICY,
        {"matchLabels": labels(ingestion, "executor")},
        [
            {
                "from": [_peer(ingestion, "driver"), _peer(ingestion, "executor")],
                "ports": tcp_ports(BLOCK_MANAGER_PORT),
            }
        ],
    )


def maintenance_policy(ingestion: DeltaIngestion) -> Manifest:
    """No ingress at all: the jobs run Spark in local mode and serve nobody."""
    stream = {k: v for k, v in labels(ingestion, "").items() if k != COMPONENT}
    selector = {
        "matchLabels": stream,
        "matchExpressions": [
            {
                "key": COMPONENT,
                "operator": "In",
                "values": list(MAINTENANCE_COMPONENTS),
            }
        ],
    }
    return _policy(ingestion, MAINTENANCE_POLICY, selector, [])


def network_policies(ingestion: DeltaIngestion, settings: Settings) -> list[Manifest]:
    """Every NetworkPolicy of the stream, applied before its driver pod is created."""
    return [
        driver_policy(ingestion, settings),
        executors_policy(ingestion),
        maintenance_policy(ingestion),
    ]
