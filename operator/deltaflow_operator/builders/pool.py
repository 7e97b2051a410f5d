"""A stream pool: one pod running ``deltaflow pool`` (Spark in local mode) for many pooled
streams of one namespace and object store, and what it needs.

The pool's ConfigMap is its membership: a key per member (``<name>.yaml``, the same document a
driver reads), ``revision`` (raised with every change; the pool reports the revision it acted
on) and the pool's Spark settings. The pod mounts it whole: the kubelet brings a change within
its sync period, or at once when the pod is touched (the operator annotates it with the
revision). The ConfigMap is owned by every member, and everything else of the pool by the
ConfigMap: deleting the last member's DeltaIngestion removes the pool.

The pool's pod carries what its members run with: the object store's keys (by ``secretKeyRef``;
values never pass the operator), the Kafka credentials' Secret files, the PersistentVolumeClaims,
the ServiceAccount's annotations (a workload identity) and the driver pod's placement. So members
share a pool only when they share all of it, with the namespace and the image (``group_of``): a
member is never given a credential, identity or volume another member holds and it does not.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import yaml

from deltaflow_api import GROUP, DeltaIngestion
from deltaflow_api.driver_pod import (
    CONFIG_MOUNT,
    ENV_METRICS_PORT,
    ENV_POD_NAME,
    ENV_SPARK_DEFAULTS,
    ENV_SPARK_MASTER,
    local_master,
)
from deltaflow_api.v1alpha1 import Resources
from deltaflow_operator.builders.common import (
    MANAGED_BY,
    Manifest,
    owner_reference,
    pod_annotations,
    pod_placement,
    restricted_container_security,
    restricted_pod_security,
    runtime_image,
    stable_hash,
)
from deltaflow_operator.builders.driver import (
    container_resources,
    data_volume_mounts,
    data_volumes,
    kafka_secret_mounts,
    kafka_secret_volumes,
    pipeline_document,
    render_spark_defaults,
    secret_env,
    spark_memory,
)
from deltaflow_operator.builders.network_policy import metrics_peers, tcp_ports
from deltaflow_operator.settings import Settings

POOL_COMPONENT = "pool"
MEMBERS_MOUNT = f"{CONFIG_MOUNT}/members"
REVISION_KEY = "revision"  # deltaflow_runtime.pool.REVISION_FILE
SPARK_DEFAULTS_KEY = "spark-defaults.conf"
# The revision the pod was last touched for: the kubelet syncs a pod's volumes when it changes.
REVISION_ANNOTATION = f"{GROUP}/pool-revision"
POOL_SPEC_HASH_ANNOTATION = f"{GROUP}/pool-spec-hash"
# Which operator release keeps the pool (a hash of its identity: a label value holds no '/').
RELEASE_LABEL = f"{GROUP}/release"
# A pool stops every member after its in-flight batch (deltaflow_runtime.pool: the batch's
# grace, its Kafka poll's end, its dead letters' commit) before it exits.
POOL_TERMINATION_GRACE_SECONDS = 150
POOL_RESCAN_SECONDS = 5


@dataclass(frozen=True)
class Pool:
    """One pool: its namespace and name, its members (sorted by name) and revision."""

    namespace: str
    name: str
    members: tuple[DeltaIngestion, ...]
    revision: int

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def entitlements(ingestion: DeltaIngestion) -> dict[str, Any]:
    """What a pool's pod carries for this member and every other one: its Kafka credentials
    (their Secret references and mechanism), ServiceAccount annotations, volumes, image pull
    secrets and driver pod options (placement, labels, annotations). Only those set, so that a
    stream without any keeps the group it had before pools carried them."""
    spec = ingestion.spec
    carried: dict[str, Any] = {
        "auth": None
        if spec.source.auth is None
        else spec.source.auth.model_dump(by_alias=True, mode="json", exclude_none=True),
        "serviceAccount": dict(spec.service_account.annotations),
        "volumes": [v.model_dump(by_alias=True, mode="json") for v in spec.volumes],
        "imagePullSecrets": [s.name for s in spec.image_pull_secrets],
        "pod": spec.driver.pod.model_dump(by_alias=True, mode="json", exclude_defaults=True),
    }
    return {k: v for k, v in carried.items() if v}


def group_of(ingestion: DeltaIngestion, settings: Settings) -> str:
    """The pools a pooled stream may share, as ``<namespace>/deltaflow-pool-<hash>``: one per
    namespace, object store (with its credentials), image and :func:`entitlements`
    (``decisions.pools.pack`` names the pools ``<group>-<n>``)."""
    storage = ingestion.spec.sink.storage
    shared = {
        "storage": None if storage is None else storage.model_dump(by_alias=True, mode="json"),
        "image": runtime_image(ingestion, settings.image),
        "release": settings.identity,  # two releases never share (or delete) a pool
        **entitlements(ingestion),
    }
    return f"{ingestion.namespace}/deltaflow-pool-{stable_hash(shared)[:8]}"


def member_file(ingestion: DeltaIngestion) -> str:
    """The member's key in its pool's ConfigMap (a file in the pool's members folder)."""
    return f"{ingestion.name}.yaml"


def member_bytes(ingestion: DeltaIngestion) -> int:
    """What the member takes of its pool's ConfigMap: its key, its document and its owner
    reference (``decisions.pools.pack`` keeps a pool's members under the object size limit)."""
    document = yaml.safe_dump(pipeline_document(ingestion), sort_keys=False)
    owner = json.dumps(_member_owner(ingestion))
    return len(member_file(ingestion)) + len(document.encode()) + len(owner)


def pool_resources(settings: Settings) -> Resources:
    return Resources(
        cores=settings.pool_cores,
        core_request=settings.pool_core_request,
        memory=settings.pool_memory,
    )


def release_label(settings: Settings) -> str:
    return stable_hash(settings.identity)


def pool_labels(name: str, settings: Settings) -> dict[str, str]:
    return {
        RELEASE_LABEL: release_label(settings),
        "app.kubernetes.io/name": "deltaflow",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/component": POOL_COMPONENT,
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "app.kubernetes.io/part-of": "deltaflow",
    }


def _member_owner(ingestion: DeltaIngestion) -> dict[str, Any]:
    # Not a controller: the ConfigMap has several owners, and goes when the last is deleted.
    owner = owner_reference(ingestion)
    return {k: owner[k] for k in ("apiVersion", "kind", "name", "uid")}


def _config_map_owner(config_map_uid: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": name,
        "uid": config_map_uid,
        "controller": True,
    }


def pool_spark_conf(pool: Pool, settings: Settings) -> dict[str, str]:
    """What the pool's JVM needs before it starts (the runtime adds the pool's own session
    settings, deltaflow_runtime.session.pool_conf): its heap and scratch space."""
    return {
        "spark.app.name": f"deltaflow-{pool.name}",
        "spark.driver.memory": spark_memory(pool_resources(settings)),
        "spark.local.dir": "/tmp/spark-local",
    }


def config_map(pool: Pool, settings: Settings) -> Manifest:
    """The pool's membership: a key per member, the revision, the pool's Spark settings."""
    data = {
        member_file(m): yaml.safe_dump(pipeline_document(m), sort_keys=False) for m in pool.members
    }
    data[REVISION_KEY] = str(pool.revision)
    data[SPARK_DEFAULTS_KEY] = render_spark_defaults(pool_spark_conf(pool, settings))
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": pool.name,
            "namespace": pool.namespace,
            "labels": pool_labels(pool.name, settings),
            "ownerReferences": [_member_owner(m) for m in pool.members],
        },
        "data": data,
    }


def pod_spec_hash(pool: Pool, settings: Settings) -> str:
    """What the running pod was made from (not its members: those change in place). A pod
    whose hash differs is replaced (every member stops after its batch and starts again)."""
    return stable_hash({"pod": _pod_spec(pool, settings), "cores": settings.pool_cores})


def _pod_spec(pool: Pool, settings: Settings) -> dict[str, Any]:
    first = pool.members[0]  # the group's image, secrets, volumes and placement are every member's
    return {
        "serviceAccountName": pool.name,
        **pod_placement(first, first.spec.driver.pod),
        # A pool that fails (its JVM gone) restarts in place, with the kubelet's backoff; each
        # member resumes from its own checkpoint.
        "restartPolicy": "Always",
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": POOL_TERMINATION_GRACE_SECONDS,
        "securityContext": restricted_pod_security(),
        "containers": [
            {
                "name": POOL_COMPONENT,
                "image": runtime_image(first, settings.image),
                "imagePullPolicy": settings.image_pull_policy,
                # Members read every 5 s: a move waits for it (the kubelet, touched, brings the
                # new ConfigMap within a second or two).
                "args": [
                    "pool",
                    "--members",
                    MEMBERS_MOUNT,
                    "--namespace",
                    pool.namespace,
                    "--rescan-seconds",
                    str(POOL_RESCAN_SECONDS),
                ],
                "env": [
                    {"name": ENV_SPARK_DEFAULTS, "value": f"{MEMBERS_MOUNT}/{SPARK_DEFAULTS_KEY}"},
                    {"name": ENV_METRICS_PORT, "value": str(settings.runtime_metrics_port)},
                    {"name": "HOME", "value": "/tmp"},
                    {"name": ENV_SPARK_MASTER, "value": local_master(settings.pool_cores)},
                    # Its report goes on its own pod (deltaflow.io/pool-report).
                    {
                        "name": ENV_POD_NAME,
                        "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
                    },
                    *secret_env(first),
                ],
                "ports": [{"name": "metrics", "containerPort": settings.runtime_metrics_port}],
                "resources": container_resources(pool_resources(settings)),
                "securityContext": restricted_container_security(),
                "volumeMounts": [
                    {"name": "members", "mountPath": MEMBERS_MOUNT, "readOnly": True},
                    {"name": "tmp", "mountPath": "/tmp"},
                    *kafka_secret_mounts(first),
                    *data_volume_mounts(first),
                ],
            }
        ],
        "volumes": [
            {"name": "members", "configMap": {"name": pool.name}},
            {"name": "tmp", "emptyDir": {}},
            *kafka_secret_volumes(first),
            *data_volumes(first),
        ],
    }


def pod(pool: Pool, settings: Settings, config_map_uid: str) -> Manifest:
    """The pool's pod, owned by its ConfigMap, with its members' pod labels and annotations
    (the group's: ``spec.driver.pod``) under Deltaflow's own."""
    options = pool.members[0].spec.driver.pod
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pool.name,
            "namespace": pool.namespace,
            "labels": {**options.labels, **pool_labels(pool.name, settings)},
            "annotations": {
                **pod_annotations(options),
                POOL_SPEC_HASH_ANNOTATION: pod_spec_hash(pool, settings),
                REVISION_ANNOTATION: str(pool.revision),
            },
            "ownerReferences": [_config_map_owner(config_map_uid, pool.name)],
        },
        "spec": _pod_spec(pool, settings),
    }


def _owned(pool: Pool, settings: Settings, config_map_uid: str) -> dict[str, Any]:
    return {
        "name": pool.name,
        "namespace": pool.namespace,
        "labels": pool_labels(pool.name, settings),
        "ownerReferences": [_config_map_owner(config_map_uid, pool.name)],
    }


def _annotated(annotations: dict[str, str]) -> dict[str, Any]:
    return {"annotations": dict(annotations)} if annotations else {}


def companions(pool: Pool, settings: Settings, config_map_uid: str) -> list[Manifest]:
    """What the pool's pod needs before it starts: its identity, allowed to read and annotate
    pods in its namespace (the chart's pool ClusterRole, for its report), and a NetworkPolicy
    that lets nothing in but metrics scrapes (``networkPolicy.metricsFrom``)."""
    metrics_rule: dict[str, Any] = {"ports": tcp_ports(settings.runtime_metrics_port)}
    if peers := metrics_peers(settings):
        metrics_rule["from"] = peers
    return [
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": _owned(pool, settings, config_map_uid),
            "spec": {
                "podSelector": {"matchLabels": pool_labels(pool.name, settings)},
                "policyTypes": ["Ingress"],
                "ingress": [metrics_rule],
            },
        },
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            # The members' workload identity (IRSA, GKE, Azure): the group shares it.
            "metadata": _owned(pool, settings, config_map_uid)
            | _annotated(pool.members[0].spec.service_account.annotations),
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _owned(pool, settings, config_map_uid),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": settings.pool_cluster_role,
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": pool.name, "namespace": pool.namespace}
            ],
        },
    ]


# What a pool does through the API: it patches its own pod's report annotation. The chart's pool
# ClusterRole holds exactly this (a test keeps the two equal).
POOL_RULES: list[dict[str, Any]] = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]},
]
