"""The Spark driver and what it needs: Pod, headless Service, RBAC, and the pipeline ConfigMap.

The driver runs the runtime in client mode against Spark's Kubernetes backend: Spark itself
creates the executor pods (owned by the driver pod, so they go when it goes) from a restricted
pod template.
"""

from __future__ import annotations

from typing import Any

import yaml

from deltaflow_operator.api import DeltaIngestion
from deltaflow_operator.api.v1alpha1 import Resources, SecretKeyRef
from deltaflow_operator.builders.common import (
    CONFIG_MOUNT,
    SPEC_HASH_ANNOTATION,
    Manifest,
    config_map_name,
    driver_pod_name,
    driver_service_name,
    labels,
    metadata,
    restricted_container_security,
    restricted_pod_security,
    service_account_name,
    stable_hash,
)
from deltaflow_operator.settings import Settings

DRIVER_PORT = 7078
BLOCK_MANAGER_PORT = 7079
UI_PORT = 4040
EXECUTOR_CONTAINER = "executor"
SPARK_CONF_DIR = f"{CONFIG_MOUNT}/spark"
KAFKA_CA_DIR = f"{CONFIG_MOUNT}/kafka-ca"
# Environment variables the runtime reads its secrets from (values come from secretKeyRefs).
ENV_KAFKA_USERNAME = "DELTAFLOW_KAFKA_USERNAME"
ENV_KAFKA_PASSWORD = "DELTAFLOW_KAFKA_PASSWORD"
ENV_STORAGE_KEY_ID = "AWS_ACCESS_KEY_ID"
ENV_STORAGE_SECRET = "AWS_SECRET_ACCESS_KEY"


def memory_with_overhead_mib(resources: Resources) -> int:
    """Container memory for a Spark JVM: heap plus Spark's default overhead (10%, >= 384 MiB)."""
    from deltaflow_operator.api.rules import memory_mib

    heap = memory_mib(resources.memory)
    return heap + max(384, heap // 10)


def container_resources(resources: Resources) -> dict[str, Any]:
    """Requests and limits: memory is capped (no surprise OOM kills of neighbours), CPU is not."""
    memory = f"{memory_with_overhead_mib(resources)}Mi"
    return {
        "requests": {"cpu": str(resources.cores), "memory": memory},
        "limits": {"memory": memory},
    }


def driver_spec_hash(ingestion: DeltaIngestion, settings: Settings) -> str:
    """Hash of everything that needs a new driver when it changes.

    Scaling bounds, maintenance schedules and ``suspend`` are left out: those apply in place.
    """
    spec = ingestion.spec.model_dump(by_alias=True, exclude={"suspend", "scaling", "maintenance"})
    return stable_hash({"spec": spec, "image": settings.image, "pull": settings.image_pull_policy})


def secret_refs(ingestion: DeltaIngestion) -> dict[str, SecretKeyRef]:
    """Every Secret key the stream references, by the field that references it."""
    refs: dict[str, SecretKeyRef] = {}
    auth = ingestion.spec.source.auth
    if auth is not None:
        for field in ("username", "password", "ca_certificate"):
            ref = getattr(auth, field)
            if ref is not None:
                refs[f"spec.source.auth.{_camel(field)}"] = ref
    storage = ingestion.spec.sink.storage
    if storage is not None:
        for field in ("access_key_id", "secret_access_key"):
            ref = getattr(storage, field)
            if ref is not None:
                refs[f"spec.sink.storage.{_camel(field)}"] = ref
    return refs


def _camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(p.title() for p in rest)


def _secret_env(name: str, ref: SecretKeyRef) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}}


def secret_env(ingestion: DeltaIngestion) -> list[dict[str, Any]]:
    """Environment variables filled from Secrets by the kubelet: values never pass the operator."""
    env = []
    auth = ingestion.spec.source.auth
    if auth is not None and auth.username is not None and auth.password is not None:
        env += [
            _secret_env(ENV_KAFKA_USERNAME, auth.username),
            _secret_env(ENV_KAFKA_PASSWORD, auth.password),
        ]
    storage = ingestion.spec.sink.storage
    if (
        storage is not None
        and storage.access_key_id is not None
        and storage.secret_access_key is not None
    ):
        env += [
            _secret_env(ENV_STORAGE_KEY_ID, storage.access_key_id),
            _secret_env(ENV_STORAGE_SECRET, storage.secret_access_key),
        ]
    return env


def spark_conf(ingestion: DeltaIngestion, settings: Settings) -> dict[str, str]:
    """Spark properties for the driver in client mode against the Kubernetes backend."""
    name, ns, spec = ingestion.name, ingestion.namespace, ingestion.spec
    conf = {
        "spark.master": "k8s://https://kubernetes.default.svc:443",
        "spark.submit.deployMode": "client",
        "spark.app.name": f"deltaflow-{ns}-{name}",
        "spark.kubernetes.namespace": ns,
        "spark.kubernetes.container.image": settings.image,
        "spark.kubernetes.container.image.pullPolicy": settings.image_pull_policy,
        # Executors get an owner reference to this pod: a replaced driver takes its executors along.
        "spark.kubernetes.driver.pod.name": driver_pod_name(name),
        "spark.kubernetes.executor.podNamePrefix": f"{name}-exec",
        "spark.kubernetes.executor.podTemplateFile": f"{CONFIG_MOUNT}/executor-pod-template.yaml",
        "spark.kubernetes.executor.podTemplateContainerName": EXECUTOR_CONTAINER,
        "spark.kubernetes.authenticate.driver.serviceAccountName": service_account_name(name),
        # No PVC handling: the driver's Role grants no access to PersistentVolumeClaims.
        "spark.kubernetes.driver.ownPersistentVolumeClaim": "false",
        "spark.kubernetes.driver.reusePersistentVolumeClaim": "false",
        "spark.driver.host": f"{driver_service_name(name)}.{ns}.svc",
        "spark.driver.bindAddress": "0.0.0.0",
        "spark.driver.port": str(DRIVER_PORT),
        "spark.driver.blockManager.port": str(BLOCK_MANAGER_PORT),
        "spark.driver.cores": str(spec.driver.cores),
        "spark.driver.memory": spec.driver.memory,
        "spark.executor.cores": str(spec.executor.cores),
        "spark.executor.memory": spec.executor.memory,
        "spark.executor.instances": str(spec.scaling.min_executors),
        "spark.local.dir": "/tmp/spark-local",
        "spark.sql.streaming.metricsEnabled": "true",
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    }
    for key, value in labels(ingestion, "executor").items():
        conf[f"spark.kubernetes.executor.label.{key}"] = value
    storage = spec.sink.storage
    if (
        storage is not None
        and storage.access_key_id is not None
        and storage.secret_access_key is not None
    ):
        # Executors write the table files, so they need the keys too; Spark injects them from
        # the Secret by reference.
        conf[f"spark.kubernetes.executor.secretKeyRef.{ENV_STORAGE_KEY_ID}"] = (
            f"{storage.access_key_id.name}:{storage.access_key_id.key}"
        )
        conf[f"spark.kubernetes.executor.secretKeyRef.{ENV_STORAGE_SECRET}"] = (
            f"{storage.secret_access_key.name}:{storage.secret_access_key.key}"
        )
    conf.update(spec.spark_conf)  # validated: users cannot override the keys above that matter
    return conf


def render_spark_defaults(conf: dict[str, str]) -> str:
    """spark-defaults.conf text (read by spark-submit through SPARK_CONF_DIR)."""
    return "".join(f"{key} {value}\n" for key, value in sorted(conf.items()))


def executor_pod_template(ingestion: DeltaIngestion) -> Manifest:
    """Pod template Spark uses for executors: restricted, no API token, writable /tmp only."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"labels": labels(ingestion, "executor")},
        "spec": {
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": restricted_pod_security(),
            "containers": [
                {
                    "name": EXECUTOR_CONTAINER,
                    "securityContext": restricted_container_security(),
                    "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                }
            ],
            "volumes": [{"name": "tmp", "emptyDir": {}}],
        },
    }


def pipeline_document(ingestion: DeltaIngestion) -> dict[str, Any]:
    """The DeltaIngestion as the runtime reads it from the ConfigMap (same model, no status)."""
    meta = {
        k: ingestion.metadata[k]
        for k in ("name", "namespace", "uid", "generation")
        if k in ingestion.metadata
    }
    return {
        "apiVersion": ingestion.api_version,
        "kind": ingestion.kind,
        "metadata": meta,
        "spec": ingestion.spec.model_dump(by_alias=True, exclude_none=True),
    }


def config_map(ingestion: DeltaIngestion, settings: Settings) -> Manifest:
    """The pipeline config: the ingestion, Spark properties and the executor pod template."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(ingestion, config_map_name(ingestion.name), "config"),
        "data": {
            "ingestion.yaml": yaml.safe_dump(pipeline_document(ingestion), sort_keys=False),
            "spark-defaults.conf": render_spark_defaults(spark_conf(ingestion, settings)),
            "executor-pod-template.yaml": yaml.safe_dump(
                executor_pod_template(ingestion), sort_keys=False
            ),
        },
    }


def config_volume(ingestion: DeltaIngestion) -> dict[str, Any]:
    """The ConfigMap as a volume laid out under /etc/deltaflow."""
    return {
        "name": "config",
        "configMap": {
            "name": config_map_name(ingestion.name),
            "items": [
                {"key": "ingestion.yaml", "path": "ingestion.yaml"},
                {"key": "spark-defaults.conf", "path": "spark/spark-defaults.conf"},
                {"key": "executor-pod-template.yaml", "path": "executor-pod-template.yaml"},
            ],
        },
    }


def _ca_volume(ingestion: DeltaIngestion) -> list[dict[str, Any]]:
    auth = ingestion.spec.source.auth
    if auth is None or auth.ca_certificate is None:
        return []
    ref = auth.ca_certificate
    return [
        {
            "name": "kafka-ca",
            "secret": {"secretName": ref.name, "items": [{"key": ref.key, "path": "ca.crt"}]},
        }
    ]


def driver_pod(ingestion: DeltaIngestion, settings: Settings) -> Manifest:
    """The driver Pod: runs ``deltaflow stream`` with the pipeline config mounted read-only."""
    name = ingestion.name
    meta = metadata(ingestion, driver_pod_name(name), "driver")
    meta["annotations"] = {SPEC_HASH_ANNOTATION: driver_spec_hash(ingestion, settings)}
    ca = _ca_volume(ingestion)
    mounts = [
        {"name": "config", "mountPath": CONFIG_MOUNT, "readOnly": True},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    if ca:
        mounts.append({"name": "kafka-ca", "mountPath": KAFKA_CA_DIR, "readOnly": True})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "serviceAccountName": service_account_name(name),
            "restartPolicy": "Never",  # the operator replaces a failed driver, with backoff
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": 60,  # let an in-flight batch commit
            "securityContext": restricted_pod_security(),
            "containers": [
                {
                    "name": "driver",
                    "image": settings.image,
                    "imagePullPolicy": settings.image_pull_policy,
                    "args": ["stream", "--config", f"{CONFIG_MOUNT}/ingestion.yaml"],
                    "env": [
                        {"name": "SPARK_CONF_DIR", "value": SPARK_CONF_DIR},
                        {
                            "name": "DELTAFLOW_METRICS_PORT",
                            "value": str(settings.runtime_metrics_port),
                        },
                        {"name": "HOME", "value": "/tmp"},
                        *secret_env(ingestion),
                    ],
                    "ports": [
                        {"name": "driver-rpc", "containerPort": DRIVER_PORT},
                        {"name": "blockmanager", "containerPort": BLOCK_MANAGER_PORT},
                        {"name": "metrics", "containerPort": settings.runtime_metrics_port},
                        {"name": "spark-ui", "containerPort": UI_PORT},
                    ],
                    "resources": container_resources(ingestion.spec.driver),
                    "securityContext": restricted_container_security(),
                    "volumeMounts": mounts,
                }
            ],
            "volumes": [config_volume(ingestion), {"name": "tmp", "emptyDir": {}}, *ca],
        },
    }


def driver_service(ingestion: DeltaIngestion, settings: Settings) -> Manifest:
    """Headless Service: a stable DNS name for executors to reach the driver, and for scraping."""
    selector = labels(ingestion, "driver")
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(ingestion, driver_service_name(ingestion.name), "driver"),
        "spec": {
            "clusterIP": "None",
            "selector": selector,
            "publishNotReadyAddresses": True,
            "ports": [
                {"name": "driver-rpc", "port": DRIVER_PORT, "targetPort": DRIVER_PORT},
                {
                    "name": "blockmanager",
                    "port": BLOCK_MANAGER_PORT,
                    "targetPort": BLOCK_MANAGER_PORT,
                },
                {
                    "name": "metrics",
                    "port": settings.runtime_metrics_port,
                    "targetPort": settings.runtime_metrics_port,
                },
            ],
        },
    }


def service_account(ingestion: DeltaIngestion) -> Manifest:
    """The driver's identity towards the API server."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(ingestion, service_account_name(ingestion.name), "driver"),
    }


# Exactly what Spark's Kubernetes backend does in client mode: manage its executor pods and the
# executor ConfigMaps. No Secrets, no Services, no PVCs, nothing outside the namespace.
DRIVER_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": [""],
        "resources": ["pods"],
        "verbs": ["get", "list", "watch", "create", "delete", "deletecollection", "patch"],
    },
    {
        "apiGroups": [""],
        "resources": ["configmaps"],
        "verbs": ["get", "list", "watch", "create", "delete", "deletecollection"],
    },
]


def role(ingestion: DeltaIngestion) -> Manifest:
    """Namespaced Role for the driver (see DRIVER_RULES)."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": metadata(ingestion, service_account_name(ingestion.name), "driver"),
        "rules": DRIVER_RULES,
    }


def role_binding(ingestion: DeltaIngestion) -> Manifest:
    """Binds the driver's Role to its ServiceAccount."""
    name = service_account_name(ingestion.name)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": metadata(ingestion, name, "driver"),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ingestion.namespace}],
    }
