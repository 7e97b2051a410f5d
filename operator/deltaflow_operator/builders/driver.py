"""The Spark driver and what it needs: Pod, headless Service, RBAC, and the pipeline ConfigMap.

The driver runs the runtime in client mode against Spark's Kubernetes backend: Spark itself
creates the executor pods (owned by the driver pod, so they go when it goes) from a restricted
pod template.

Nothing here depends on cluster DNS: the ConfigMap's spark-defaults.conf names neither the master
nor the driver's address. The driver pod carries its own IP (downward API, ``DELTAFLOW_POD_IP``)
and the marker ``DELTAFLOW_SPARK_MASTER=k8s://in-cluster``; at start the runtime
(``deltaflow_runtime.session``) makes the master from ``KUBERNETES_SERVICE_HOST`` and
``KUBERNETES_SERVICE_PORT`` (set by the kubelet in every pod) and gives executors the pod IP as
``spark.driver.host``.
"""

from __future__ import annotations

from secrets import token_urlsafe
from typing import Any

import yaml

from deltaflow_api import GROUP, DeltaIngestion
from deltaflow_api.driver_pod import (
    BLOCK_MANAGER_PORT,
    CONFIG_MOUNT,
    DRIVER_PORT,
    ENV_METRICS_PORT,
    ENV_POD_IP,
    ENV_POD_NAME,
    ENV_SPARK_DEFAULTS,
    ENV_SPARK_MASTER,
    IN_CLUSTER_MASTER,
    NETWORK_CONF,
    SPARK_AUTH_DIRECTORY,
    SPARK_AUTH_FILE,
    SPARK_AUTH_KEY,
    SPARK_AUTH_VOLUME,
    SPARK_DEFAULTS_FILE,
    SPARK_MODE_ANNOTATION,
    kafka_secret_refs,
    local_master,
)
from deltaflow_api.v1alpha1 import Resources, Scaling, SecretKeyRef, Volume
from deltaflow_operator.builders.common import (
    SPEC_HASH_ANNOTATION,
    Manifest,
    config_map_name,
    driver_pod_name,
    driver_service_name,
    executor_pod_name_prefix,
    labels,
    metadata,
    pod_annotations,
    pod_labels,
    pod_placement,
    restricted_container_security,
    restricted_pod_security,
    runtime_image,
    service_account_name,
    spark_auth_secret_name,
    stable_hash,
)
from deltaflow_operator.decisions.placement import driver_mode
from deltaflow_operator.settings import Settings

EXECUTOR_CONTAINER = "executor"
# Environment variables the runtime reads its secrets from (values come from secretKeyRefs).
ENV_STORAGE_KEY_ID = "AWS_ACCESS_KEY_ID"
KAFKA_SECRET_FILE_MODE = 0o440
ENV_STORAGE_SECRET = "AWS_SECRET_ACCESS_KEY"


def memory_with_overhead_mib(resources: Resources) -> int:
    """Container memory for a Spark JVM: heap plus Spark's default overhead (10%, >= 384 MiB)."""
    from deltaflow_api.rules import memory_mib

    heap = memory_mib(resources.memory)
    return heap + max(384, heap // 10)


def spark_memory(resources: Resources) -> str:
    """``memory`` in the one form every Spark setting reads: MiB, 'm'."""
    from deltaflow_api.rules import memory_mib

    return f"{memory_mib(resources.memory)}m"


def cpu_request(resources: Resources) -> str:
    """The pod's CPU request: ``coreRequest`` when given, else the Spark cores."""
    return resources.core_request or str(resources.cores)


def container_resources(resources: Resources) -> dict[str, Any]:
    """Requests and limits: memory is capped (no surprise OOM kills of neighbours), CPU only when
    ``coreLimit`` says so (a capped JVM is throttled)."""
    memory = f"{memory_with_overhead_mib(resources)}Mi"
    limits = {"memory": memory}
    if resources.core_limit is not None:
        limits["cpu"] = resources.core_limit
    return {"requests": {"cpu": cpu_request(resources), "memory": memory}, "limits": limits}


def driver_spec_hash(ingestion: DeltaIngestion, settings: Settings) -> str:
    """Hash of everything that needs a new driver when it changes.

    Scaling bounds, maintenance schedules and ``suspend`` are left out: those apply in place.
    """
    spec = ingestion.spec.model_dump(by_alias=True, exclude={"suspend", "scaling", "maintenance"})
    return stable_hash(
        {
            "spec": spec,
            "image": runtime_image(ingestion, settings.image),
            "pull": settings.image_pull_policy,
            # A driver started without these (an older operator's) is replaced once: its
            # executors' random block-manager ports are not the ones the NetworkPolicy opens.
            "network": NETWORK_CONF,
            # Likewise a driver running as an earlier operator's ServiceAccount name, which the
            # admission policy does not know and whose RoleBinding is gone.
            "identity": service_account_name(ingestion.name),
            # A move between local mode and executor pods is a new driver (decisions.placement).
            "master": spark_master(ingestion),
            # Kafka's secrets moved from environment variables to mounted files: a driver
            # started with them in its environment reads them from files once replaced.
            "kafkaSecrets": "files",
        }
    )


def secret_refs(ingestion: DeltaIngestion) -> dict[str, SecretKeyRef]:
    """Every Secret key the stream references, by the field that references it."""
    refs = {
        f"spec.source.auth.{secret_file.field}": ref
        for secret_file, ref in kafka_secret_refs(ingestion.spec.source.auth)
    }
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


def secret_env_refs(ingestion: DeltaIngestion) -> list[tuple[str, SecretKeyRef]]:
    """(environment variable, Secret key) pairs the runtime reads the object store's keys from
    (Kafka's secrets are files: :func:`kafka_secret_volumes`)."""
    refs: list[tuple[str, SecretKeyRef]] = []
    storage = ingestion.spec.sink.storage
    if (
        storage is not None
        and storage.access_key_id is not None
        and storage.secret_access_key is not None
    ):
        refs += [
            (ENV_STORAGE_KEY_ID, storage.access_key_id),
            (ENV_STORAGE_SECRET, storage.secret_access_key),
        ]
    return refs


def secret_env(ingestion: DeltaIngestion) -> list[dict[str, Any]]:
    """Environment variables filled from Secrets by the kubelet: values never pass the operator."""
    return [_secret_env(name, ref) for name, ref in secret_env_refs(ingestion)]


def spark_conf(ingestion: DeltaIngestion, settings: Settings) -> dict[str, str]:
    """Spark properties for the driver in client mode against the Kubernetes backend.

    No ``spark.master`` and no ``spark.driver.host``: both are only known in the pod (see the
    module docstring), so the ConfigMap stays the same for every incarnation of the driver.
    """
    name, ns, spec = ingestion.name, ingestion.namespace, ingestion.spec
    conf = {
        "spark.submit.deployMode": "client",
        "spark.app.name": f"deltaflow-{ns}-{name}",
        "spark.kubernetes.namespace": ns,
        "spark.kubernetes.container.image": runtime_image(ingestion, settings.image),
        "spark.kubernetes.container.image.pullPolicy": settings.image_pull_policy,
        # Executors get an owner reference to this pod: a replaced driver takes its executors along.
        "spark.kubernetes.driver.pod.name": driver_pod_name(name),
        "spark.kubernetes.executor.podNamePrefix": executor_pod_name_prefix(name),
        "spark.kubernetes.executor.podTemplateFile": f"{CONFIG_MOUNT}/executor-pod-template.yaml",
        "spark.kubernetes.executor.podTemplateContainerName": EXECUTOR_CONTAINER,
        "spark.kubernetes.authenticate.driver.serviceAccountName": service_account_name(name),
        # No PVC handling: the driver's Role grants no access to PersistentVolumeClaims.
        "spark.kubernetes.driver.ownPersistentVolumeClaim": "false",
        "spark.kubernetes.driver.reusePersistentVolumeClaim": "false",
        # No executor ConfigMap (a copy of the driver's SPARK_CONF_DIR that the image's executor
        # command never reads): the driver's Role grants no access to ConfigMaps.
        "spark.kubernetes.executor.disableConfigMap": "true",
        "spark.driver.cores": str(spec.driver.cores),
        "spark.driver.memory": spark_memory(spec.driver),
        "spark.executor.cores": str(spec.executor.cores),
        "spark.executor.memory": spark_memory(spec.executor),
        # The starting count; the operator's autoscaler (or /scale in manual mode) changes it
        # live through the driver (deltaflow_runtime.executors), never by restarting it.
        "spark.executor.instances": str(_starting_executors(spec.scaling)),
        "spark.dynamicAllocation.enabled": "false",
        # A scale-down decommissions idle executors (deltaflow_runtime.executors): their shuffle
        # and cached blocks (Delta's snapshot state among them) move to the executors that stay,
        # so no later stage fails fetching output a released executor held.
        "spark.decommission.enabled": "true",
        "spark.storage.decommission.enabled": "true",
        "spark.storage.decommission.shuffleBlocks.enabled": "true",
        "spark.storage.decommission.rddBlocks.enabled": "true",
        "spark.local.dir": "/tmp/spark-local",
        "spark.sql.streaming.metricsEnabled": "true",
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    }
    if spec.executor.core_request is not None:
        # The pod asks the scheduler for less (or more) CPU than the task slots Spark runs.
        conf["spark.kubernetes.executor.request.cores"] = spec.executor.core_request
    if spec.executor.core_limit is not None:
        conf["spark.kubernetes.executor.limit.cores"] = spec.executor.core_limit
    for key, value in labels(ingestion, "executor").items():
        conf[f"spark.kubernetes.executor.label.{key}"] = value
    # Executors run the Kafka consumers and write the table files, so they get the same
    # credentials as the driver; Spark injects them from the Secrets by reference.
    for env_name, ref in secret_env_refs(ingestion):
        conf[f"spark.kubernetes.executor.secretKeyRef.{env_name}"] = f"{ref.name}:{ref.key}"
    conf.update(spec.spark_conf)  # validated: users cannot override the keys above that matter
    # Last: a resource stored before admission refused these keys must not turn them off.
    conf.update(NETWORK_CONF)
    # The generic key, not .driver.file and .executor.file: an executor's first call (fetching
    # the driver's properties) authenticates with a SecurityManager that reads this one only.
    conf["spark.authenticate.secret.file"] = SPARK_AUTH_FILE
    return conf


def spark_auth_secret(ingestion: DeltaIngestion) -> Manifest:
    """The stream's Spark authentication secret: 32 random bytes, made once (the operator
    creates it and never reads or changes it; it goes with the DeltaIngestion). Only its own
    driver and executors mount it."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata(ingestion, spark_auth_secret_name(ingestion.name), "driver"),
        "type": "Opaque",
        "stringData": {SPARK_AUTH_KEY: token_urlsafe(32)},
    }


def _spark_auth_volume(ingestion: DeltaIngestion) -> dict[str, Any]:
    # Not optional: a driver without it would make a secret of its own its executors lack.
    return {
        "name": SPARK_AUTH_VOLUME,
        "secret": {
            "secretName": spark_auth_secret_name(ingestion.name),
            "items": [{"key": SPARK_AUTH_KEY, "path": SPARK_AUTH_KEY}],
            "defaultMode": KAFKA_SECRET_FILE_MODE,
        },
    }


_SPARK_AUTH_MOUNT = {"name": SPARK_AUTH_VOLUME, "mountPath": SPARK_AUTH_DIRECTORY, "readOnly": True}


def _starting_executors(scaling: Scaling) -> int:
    # A driver on executor pods runs at least one (a count of 0 is a local-mode driver, which
    # ignores this); the autoscaler asks a moved driver for more once it reports.
    if scaling.mode == "manual" and scaling.executors is not None:
        return max(1, scaling.executors)
    return max(1, scaling.min_executors)


def driver_pod_mode(ingestion: DeltaIngestion) -> str:
    """``local`` or ``executors``: the mode a driver started now runs in."""
    placement = ingestion.status.placement if ingestion.status is not None else None
    return driver_mode(ingestion.spec, placement)


def spark_master(ingestion: DeltaIngestion) -> str:
    """The driver's master: local mode with spec.driver.cores task threads while its
    placement is local (decisions.placement), else the in-cluster Kubernetes backend."""
    if driver_pod_mode(ingestion) == "local":
        return local_master(ingestion.spec.driver.cores)
    return IN_CLUSTER_MASTER


SPARK_DEFAULTS_HEADER = (
    "# Written by the Deltaflow operator. The runtime sets at start: spark.master from\n"
    f"# KUBERNETES_SERVICE_HOST/PORT ({ENV_SPARK_MASTER}={IN_CLUSTER_MASTER}), and\n"
    f"# spark.driver.host to the pod's IP ({ENV_POD_IP}).\n"
)


def render_spark_defaults(conf: dict[str, str]) -> str:
    """spark-defaults.conf text (the runtime reads it: session.spark_defaults)."""
    return SPARK_DEFAULTS_HEADER + "".join(
        f"{key} {value}\n" for key, value in sorted(conf.items())
    )


def _pvc_volume(volume: Volume) -> dict[str, Any]:
    source: dict[str, Any] = {"claimName": volume.claim_name}
    if volume.read_only:
        source["readOnly"] = True
    return {"name": volume.name, "persistentVolumeClaim": source}


def _pvc_mount(volume: Volume) -> dict[str, Any]:
    mount: dict[str, Any] = {"name": volume.name, "mountPath": volume.mount_path}
    if volume.read_only:
        mount["readOnly"] = True
    return mount


def data_volumes(ingestion: DeltaIngestion) -> list[dict[str, Any]]:
    """The pod volumes of ``spec.volumes`` (PersistentVolumeClaims: allowed by "restricted")."""
    return [_pvc_volume(v) for v in ingestion.spec.volumes]


def data_volume_mounts(ingestion: DeltaIngestion) -> list[dict[str, Any]]:
    """The container mounts of ``spec.volumes``, at the same paths in every pod."""
    return [_pvc_mount(v) for v in ingestion.spec.volumes]


def kafka_secret_volumes(ingestion: DeltaIngestion) -> list[dict[str, Any]]:
    """One secret volume per Secret key spec.source.auth references (driver_pod's
    KAFKA_SECRET_FILES). Optional: a pod whose Secret is missing still starts, and its driver
    names the missing field (KafkaCredentialsMissing) instead of the pod waiting unseen in
    ContainerCreating. Readable by the pod's group only (the pods set fsGroup)."""
    return [
        {
            "name": secret_file.volume,
            "secret": {
                "secretName": ref.name,
                "items": [{"key": ref.key, "path": secret_file.file}],
                "optional": True,
                "defaultMode": KAFKA_SECRET_FILE_MODE,
            },
        }
        for secret_file, ref in kafka_secret_refs(ingestion.spec.source.auth)
    ]


def kafka_secret_mounts(ingestion: DeltaIngestion) -> list[dict[str, Any]]:
    """Where the runtime's Kafka clients find those files: the same folders in every pod."""
    return [
        {"name": secret_file.volume, "mountPath": secret_file.directory, "readOnly": True}
        for secret_file, _ in kafka_secret_refs(ingestion.spec.source.auth)
    ]


def executor_pod_template(ingestion: DeltaIngestion) -> Manifest:
    """Pod template Spark uses for executors: restricted, no API token, writable /tmp, the
    Kafka secrets at the driver's paths (the Kafka consumers run here) and spec.volumes."""
    options = ingestion.spec.executor.pod
    meta: dict[str, Any] = {"labels": pod_labels(ingestion, "executor", options)}
    if pod_annotations(options):
        meta["annotations"] = pod_annotations(options)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            **pod_placement(ingestion, options),
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": restricted_pod_security(),
            "containers": [
                {
                    "name": EXECUTOR_CONTAINER,
                    "securityContext": restricted_container_security(),
                    "volumeMounts": [
                        {"name": "tmp", "mountPath": "/tmp"},
                        _SPARK_AUTH_MOUNT,
                        *kafka_secret_mounts(ingestion),
                        *data_volume_mounts(ingestion),
                    ],
                }
            ],
            "volumes": [
                {"name": "tmp", "emptyDir": {}},
                _spark_auth_volume(ingestion),
                *kafka_secret_volumes(ingestion),
                *data_volumes(ingestion),
            ],
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


def driver_pod(ingestion: DeltaIngestion, settings: Settings) -> Manifest:
    """The driver Pod: runs ``deltaflow stream`` with the pipeline config mounted read-only."""
    name = ingestion.name
    options = ingestion.spec.driver.pod
    meta = metadata(ingestion, driver_pod_name(name), "driver")
    meta["labels"] = pod_labels(ingestion, "driver", options)
    master = spark_master(ingestion)
    meta["annotations"] = {
        **pod_annotations(options),
        SPEC_HASH_ANNOTATION: driver_spec_hash(ingestion, settings),
        SPARK_MODE_ANNOTATION: driver_pod_mode(ingestion),
    }
    mounts = [
        {"name": "config", "mountPath": CONFIG_MOUNT, "readOnly": True},
        {"name": "tmp", "mountPath": "/tmp"},
        _SPARK_AUTH_MOUNT,
        *kafka_secret_mounts(ingestion),
        *data_volume_mounts(ingestion),
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "serviceAccountName": service_account_name(name),
            **pod_placement(ingestion, options),
            "restartPolicy": "Never",  # the operator replaces a failed driver, with backoff
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": 60,  # let an in-flight batch commit
            "securityContext": restricted_pod_security(),
            "containers": [
                {
                    "name": "driver",
                    "image": runtime_image(ingestion, settings.image),
                    "imagePullPolicy": settings.image_pull_policy,
                    "args": ["stream", "--config", f"{CONFIG_MOUNT}/ingestion.yaml"],
                    "env": [
                        {"name": ENV_SPARK_DEFAULTS, "value": SPARK_DEFAULTS_FILE},
                        {
                            "name": ENV_METRICS_PORT,
                            "value": str(settings.runtime_metrics_port),
                        },
                        {"name": "HOME", "value": "/tmp"},
                        # Executors connect to this IP: no cluster DNS needed.
                        {
                            "name": ENV_POD_IP,
                            "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
                        },
                        {"name": ENV_SPARK_MASTER, "value": master},
                        # In a pod: its tables and checkpoint must be on a volume.
                        {
                            "name": ENV_POD_NAME,
                            "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
                        },
                        *secret_env(ingestion),
                    ],
                    "ports": [
                        {"name": "driver-rpc", "containerPort": DRIVER_PORT},
                        {"name": "blockmanager", "containerPort": BLOCK_MANAGER_PORT},
                        {"name": "metrics", "containerPort": settings.runtime_metrics_port},
                    ],
                    "resources": container_resources(ingestion.spec.driver),
                    "securityContext": restricted_container_security(),
                    "volumeMounts": mounts,
                }
            ],
            "volumes": [
                config_volume(ingestion),
                {"name": "tmp", "emptyDir": {}},
                _spark_auth_volume(ingestion),
                *kafka_secret_volumes(ingestion),
                *data_volumes(ingestion),
            ],
        },
    }


def driver_service(ingestion: DeltaIngestion, settings: Settings) -> Manifest:
    """Headless Service: the driver's endpoints for discovery and metrics scraping (executors
    reach the driver by its pod IP, without DNS)."""
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


# The executor pods the driver may create, as the chart's admission policy reads them from the
# driver's ServiceAccount (its parameter): the image, and the Secrets and PersistentVolumeClaims
# they may name (space-separated). Admission keeps users' keys out of deltaflow.io/.
EXECUTOR_IMAGE_ANNOTATION = f"{GROUP}/executor-image"
EXECUTOR_SECRETS_ANNOTATION = f"{GROUP}/executor-secrets"
EXECUTOR_CLAIMS_ANNOTATION = f"{GROUP}/executor-claims"


def executor_allowance(ingestion: DeltaIngestion, settings: Settings) -> dict[str, str]:
    """What the stream's executor pods may use: every Secret the stream references (Kafka and
    object-store credentials, the Kafka CA, image pull secrets) and its spec.volumes claims."""
    secrets = {ref.name for ref in secret_refs(ingestion).values()}
    secrets |= {s.name for s in ingestion.spec.image_pull_secrets}
    secrets.add(spark_auth_secret_name(ingestion.name))
    claims = {v.claim_name for v in ingestion.spec.volumes}
    return {
        EXECUTOR_IMAGE_ANNOTATION: runtime_image(ingestion, settings.image),
        EXECUTOR_SECRETS_ANNOTATION: " ".join(sorted(secrets)),
        EXECUTOR_CLAIMS_ANNOTATION: " ".join(sorted(claims)),
    }


def service_account(ingestion: DeltaIngestion, settings: Settings) -> Manifest:
    """The driver's identity towards the API server, carrying what its executors may use."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            **metadata(ingestion, service_account_name(ingestion.name), "driver"),
            "annotations": {
                **ingestion.spec.service_account.annotations,
                **executor_allowance(ingestion, settings),
            },
        },
    }


# Exactly what the driver does through the API: Spark's Kubernetes backend in client mode
# manages its executor pods (creates them, watches and lists them by label, labels and deletes
# them, one at a time or by label at the end), and the scaling channel reads and annotates the
# driver's own pod. No ConfigMaps (spark.kubernetes.executor.disableConfigMap: the executors'
# command line never reads one), no Secrets, no Services, no PVCs, nothing outside the namespace.
# The chart's driver ClusterRole holds these rules (a test keeps the two equal, and another
# derives them); each driver gets them in its own namespace through a RoleBinding.
DRIVER_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": [""],
        "resources": ["pods"],
        "verbs": ["get", "list", "watch", "create", "delete", "deletecollection", "patch"],
    },
]


def role_binding(ingestion: DeltaIngestion, settings: Settings) -> Manifest:
    """Grants the chart's driver ClusterRole (see DRIVER_RULES) to the driver's ServiceAccount,
    in the stream's namespace only."""
    name = service_account_name(ingestion.name)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": metadata(ingestion, name, "driver"),
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": settings.driver_cluster_role,
        },
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ingestion.namespace}],
    }
