"""Names, labels, owner references and the restricted security context shared by every child."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from deltaflow_operator.api import GROUP, KIND, VERSION, DeltaIngestion

Manifest = dict[str, Any]
MANAGED_BY = "deltaflow-operator"
SPEC_HASH_ANNOTATION = f"{GROUP}/driver-spec-hash"
RUNTIME_UID = 185  # the spark user of the runtime image; never root
CONFIG_MOUNT = "/etc/deltaflow"


def driver_pod_name(name: str) -> str:
    """The driver pod's fixed name: at most one driver per stream can exist at a time."""
    return f"{name}-driver"


def driver_service_name(name: str) -> str:
    """Headless Service executors use to reach the driver."""
    return f"{name}-driver"


def service_account_name(name: str) -> str:
    """The driver's ServiceAccount (also the name of its Role and RoleBinding)."""
    return f"{name}-spark"


def config_map_name(name: str) -> str:
    """The ConfigMap with the rendered pipeline config."""
    return f"{name}-config"


def cronjob_name(name: str, job: str) -> str:
    """The CronJob running one maintenance job (``optimize`` or ``vacuum``)."""
    return f"{name}-{job}"


def labels(ingestion: DeltaIngestion, component: str) -> dict[str, str]:
    """Recommended app.kubernetes.io labels for a child of ``ingestion``."""
    return {
        "app.kubernetes.io/name": "deltaflow",
        "app.kubernetes.io/instance": ingestion.name,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "app.kubernetes.io/part-of": "deltaflow",
    }


def owner_reference(ingestion: DeltaIngestion) -> dict[str, Any]:
    """Controller owner reference: deleting the DeltaIngestion garbage-collects the child."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "name": ingestion.name,
        "uid": str(ingestion.metadata["uid"]),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def metadata(ingestion: DeltaIngestion, name: str, component: str) -> dict[str, Any]:
    """Child metadata: name, namespace, labels and the owner reference."""
    return {
        "name": name,
        "namespace": ingestion.namespace,
        "labels": labels(ingestion, component),
        "ownerReferences": [owner_reference(ingestion)],
    }


def restricted_container_security() -> dict[str, Any]:
    """A container security context that passes the "restricted" Pod Security Standard."""
    return {
        "runAsNonRoot": True,
        "runAsUser": RUNTIME_UID,
        "runAsGroup": RUNTIME_UID,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def restricted_pod_security() -> dict[str, Any]:
    """Pod-level security context matching :func:`restricted_container_security`."""
    return {
        "runAsNonRoot": True,
        "runAsUser": RUNTIME_UID,
        "runAsGroup": RUNTIME_UID,
        "fsGroup": RUNTIME_UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def stable_hash(value: Any) -> str:
    """A short hash of a JSON-able value, independent of key order."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]
