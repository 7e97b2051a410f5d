"""Names, labels, owner references and the restricted security context shared by every child."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from deltaflow_api import GROUP, KIND, VERSION, DeltaIngestion, names
from deltaflow_api.rules import reserved_key
from deltaflow_api.v1alpha1 import PodOptions

Manifest = dict[str, Any]
MANAGED_BY = "deltaflow-operator"
SPEC_HASH_ANNOTATION = f"{GROUP}/driver-spec-hash"
RUNTIME_UID = 185  # the spark user of the runtime image; never root


def driver_pod_name(name: str) -> str:
    """The driver pod's fixed name: at most one driver per stream can exist at a time."""
    return names.DRIVER_POD.of(name)


def driver_service_name(name: str) -> str:
    """Headless Service executors use to reach the driver."""
    return names.DRIVER_SERVICE.of(name)


def service_account_name(name: str) -> str:
    """The driver's ServiceAccount (also the name of its RoleBinding)."""
    return names.DRIVER_IDENTITY.of(name)


def config_map_name(name: str) -> str:
    """The ConfigMap with the rendered pipeline config."""
    return names.CONFIG_MAP.of(name)


def spark_auth_secret_name(name: str) -> str:
    """The Secret holding the stream's Spark authentication secret."""
    return names.SPARK_AUTH_SECRET.of(name)


def cronjob_name(name: str, job: str) -> str:
    """The CronJob running one maintenance job (``optimize`` or ``vacuum``)."""
    return {"optimize": names.OPTIMIZE_CRONJOB, "vacuum": names.VACUUM_CRONJOB}[job].of(name)


def executor_pod_name_prefix(name: str) -> str:
    """What Spark names executor pods after: ``<prefix>-exec-<id>``."""
    return names.EXECUTOR_PREFIX.of(name)


def runtime_image(ingestion: DeltaIngestion, default: str) -> str:
    """The image the stream's pods run: ``spec.image``, else the operator's ``default``."""
    return ingestion.spec.image or default


def labels(ingestion: DeltaIngestion, component: str) -> dict[str, str]:
    """Recommended app.kubernetes.io labels for a child of ``ingestion``."""
    return {
        "app.kubernetes.io/name": "deltaflow",
        "app.kubernetes.io/instance": ingestion.name,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "app.kubernetes.io/part-of": "deltaflow",
    }


def pod_labels(ingestion: DeltaIngestion, component: str, options: PodOptions) -> dict[str, str]:
    """The user's labels for a role's pods, with Deltaflow's own on top (they select the pods)."""
    return {**options.labels, **labels(ingestion, component)}


def pod_annotations(options: PodOptions) -> dict[str, str]:
    """The user's annotations for a role's pods, without keys under the operator's own prefix
    (``deltaflow.io/``): one there would preset the executor count the driver is asked for, or a
    report the operator reads. Admission refuses them; a resource stored before that rule may
    still hold them."""
    return {k: v for k, v in options.annotations.items() if not reserved_key(k)}


def pod_placement(ingestion: DeltaIngestion, options: PodOptions) -> dict[str, Any]:
    """Pod spec fields that place and admit a role's pods: node selector, tolerations,
    affinity, priority class and the image pull secrets (only those set)."""
    fields: dict[str, Any] = {
        "nodeSelector": dict(options.node_selector),
        "tolerations": [
            t.model_dump(by_alias=True, exclude_none=True) for t in options.tolerations
        ],
        "affinity": dict(options.affinity),
        "priorityClassName": options.priority_class_name,
        "imagePullSecrets": [{"name": s.name} for s in ingestion.spec.image_pull_secrets],
    }
    return {k: v for k, v in fields.items() if v}


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
