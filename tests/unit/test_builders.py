"""Builders: a DeltaIngestion in, manifests out; checked without a cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from deltaflow_api import DeltaIngestion
from deltaflow_operator.builders import driver as b
from deltaflow_operator.builders.common import SPEC_HASH_ANNOTATION
from deltaflow_operator.builders.maintenance import maintenance_cronjob
from deltaflow_operator.settings import Settings
from support.manifests import valid_manifest

SETTINGS = Settings(image="deltaflow:1.2.3")
REPO = Path(__file__).resolve().parents[2]


def ingestion(**spec_changes: Any) -> DeltaIngestion:
    m = valid_manifest()
    m["metadata"].update(uid="0000-1111", generation=3)
    m["spec"].update(spec_changes)
    return DeltaIngestion.model_validate(m)


def _restricted(container_ctx: dict[str, Any], pod_ctx: dict[str, Any]) -> None:
    assert container_ctx["runAsNonRoot"] is True
    assert container_ctx["allowPrivilegeEscalation"] is False
    assert container_ctx["capabilities"] == {"drop": ["ALL"]}
    assert container_ctx["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container_ctx["readOnlyRootFilesystem"] is True
    assert pod_ctx["runAsNonRoot"] is True
    assert container_ctx["runAsUser"] != 0


def test_driver_pod_is_restricted_owned_and_runs_the_stream() -> None:
    pod = b.driver_pod(ingestion(), SETTINGS)
    assert pod["metadata"]["name"] == "orders-driver"
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "0000-1111"
    spec = pod["spec"]
    container = spec["containers"][0]
    _restricted(container["securityContext"], spec["securityContext"])
    assert spec["restartPolicy"] == "Never"
    assert spec["serviceAccountName"] == "orders-deltaflow-driver"
    assert container["image"] == "deltaflow:1.2.3"
    assert container["args"] == ["stream", "--config", "/etc/deltaflow/ingestion.yaml"]
    env = {e["name"]: e for e in container["env"]}
    # The file itself, not a SPARK_CONF_DIR (which would break the JVM's class-data archive).
    assert env["DELTAFLOW_SPARK_DEFAULTS"]["value"] == "/etc/deltaflow/spark/spark-defaults.conf"
    assert "SPARK_CONF_DIR" not in env
    # 1g heap + 384 MiB overhead, memory limited, CPU requested.
    assert container["resources"] == {
        "requests": {"cpu": "1", "memory": "1408Mi"},
        "limits": {"memory": "1408Mi"},
    }


def test_secrets_only_by_reference() -> None:
    spec_auth = {
        "source": {
            **valid_manifest()["spec"]["source"],
            "auth": {
                "securityProtocol": "SASL_SSL",
                "saslMechanism": "PLAIN",
                "username": {"name": "kc", "key": "u"},
                "password": {"name": "kc", "key": "p"},
                "caCertificate": {"name": "kca", "key": "ca.pem"},
            },
        },
        "sink": {
            "tablePath": "s3a://lake/orders",
            "storage": {
                "accessKeyId": {"name": "lake", "key": "id"},
                "secretAccessKey": {"name": "lake", "key": "secret"},
            },
        },
    }
    ing = ingestion(**spec_auth)
    pod = b.driver_pod(ing, SETTINGS)
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"] == {
        "secretKeyRef": {"name": "lake", "key": "secret"}
    }
    assert all("value" not in e for n, e in env.items() if n.startswith("AWS_"))
    # Kafka's secrets are files, never environment variables (Spark copies its environment
    # into its event log and executors' pod specs).
    assert not any(n.startswith("DELTAFLOW_KAFKA") for n in env)
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["kafka-password"]["secret"] == {
        "secretName": "kc",
        "items": [{"key": "p", "path": "password"}],
        "optional": True,
        "defaultMode": 0o440,
    }
    assert volumes["kafka-ca"]["secret"]["items"] == [{"key": "ca.pem", "path": "ca.crt"}]
    conf = b.spark_conf(ing, SETTINGS)
    assert conf["spark.kubernetes.executor.secretKeyRef.AWS_SECRET_ACCESS_KEY"] == "lake:secret"
    assert not any("KAFKA" in k for k in conf)


def test_spark_conf_runs_client_mode_against_kubernetes() -> None:
    conf = b.spark_conf(ingestion(sparkConf={"spark.sql.shuffle.partitions": "16"}), SETTINGS)
    assert conf["spark.submit.deployMode"] == "client"
    assert (
        conf["spark.kubernetes.driver.pod.name"] == "orders-driver"
    )  # executors owned by the driver
    assert conf["spark.executor.memory"] == "2048m"
    assert conf["spark.executor.instances"] == "1"
    assert conf["spark.sql.shuffle.partitions"] == "16"
    template = b.executor_pod_template(ingestion())
    _restricted(
        template["spec"]["containers"][0]["securityContext"], template["spec"]["securityContext"]
    )
    assert template["spec"]["automountServiceAccountToken"] is False


def test_driver_gets_the_charts_cluster_role_in_its_own_namespace_only() -> None:
    binding = b.role_binding(ingestion(), SETTINGS)
    assert binding["kind"] == "RoleBinding"  # namespaced: nothing outside the stream's namespace
    assert binding["metadata"]["namespace"] == "data"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": SETTINGS.driver_cluster_role,
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "orders-deltaflow-driver", "namespace": "data"}
    ]
    assert {r for rule in b.DRIVER_RULES for r in rule["resources"]} == {"pods"}


def test_config_map_holds_what_the_runtime_reads() -> None:
    cm = b.config_map(ingestion(), SETTINGS)
    doc = yaml.safe_load(cm["data"]["ingestion.yaml"])
    assert DeltaIngestion.model_validate(doc).spec == ingestion().spec
    assert "spark.kubernetes.namespace data\n" in cm["data"]["spark-defaults.conf"]
    assert yaml.safe_load(cm["data"]["executor-pod-template.yaml"])["kind"] == "Pod"


def test_spec_hash_ignores_in_place_fields_only() -> None:
    base = b.driver_pod(ingestion(), SETTINGS)["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
    same = [
        ingestion(scaling={"minExecutors": 2, "maxExecutors": 20}),
        ingestion(suspend=True),
        ingestion(maintenance={"vacuum": {"retentionHours": 300}}),
    ]
    for ing in same:
        assert b.driver_spec_hash(ing, SETTINGS) == base
    different = [
        ingestion(executor={"memory": "4g"}),
        ingestion(trigger={"interval": "30s"}),
        ingestion(sparkConf={"spark.sql.shuffle.partitions": "4"}),
    ]
    for ing in different:
        assert b.driver_spec_hash(ing, SETTINGS) != base
    assert b.driver_spec_hash(ingestion(), Settings(image="deltaflow:2")) != base


def test_maintenance_cronjobs_follow_schedule_and_suspend() -> None:
    optimize = maintenance_cronjob(ingestion(), SETTINGS, "optimize")
    assert optimize["spec"]["schedule"] == "0 * * * *"
    assert optimize["spec"]["suspend"] is False
    assert optimize["spec"]["concurrencyPolicy"] == "Forbid"
    pod = optimize["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    _restricted(pod["containers"][0]["securityContext"], pod["securityContext"])
    assert pod["containers"][0]["args"] == ["optimize", "--config", "/etc/deltaflow/ingestion.yaml"]
    assert pod["automountServiceAccountToken"] is False
    vacuum = maintenance_cronjob(ingestion(suspend=True), SETTINGS, "vacuum")
    assert vacuum["spec"]["schedule"] == "30 3 * * *"
    assert vacuum["spec"]["suspend"] is True


# --- pods that work on a real node -------------------------------------------------------------

SASL_AUTH = {
    "securityProtocol": "SASL_SSL",
    "saslMechanism": "SCRAM-SHA-512",
    "username": {"name": "kc", "key": "u"},
    "password": {"name": "kc", "key": "p"},
    "caCertificate": {"name": "kca", "key": "ca.pem"},
}
VOLUMES = [
    {"name": "lake", "claimName": "lake-pvc", "mountPath": "/lake"},
    {"name": "ref", "claimName": "ref-data", "mountPath": "/data/ref", "readOnly": True},
]
# Volume types the "restricted" Pod Security Standard allows.
RESTRICTED_VOLUME_TYPES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


def _pod_specs(ing: DeltaIngestion) -> dict[str, dict[str, Any]]:
    """Every pod spec the operator makes for ``ing``: driver, executors, maintenance jobs."""
    return {
        "driver": b.driver_pod(ing, SETTINGS)["spec"],
        "executor": b.executor_pod_template(ing)["spec"],
        **{
            job: maintenance_cronjob(ing, SETTINGS, job)["spec"]["jobTemplate"]["spec"]["template"][
                "spec"
            ]
            for job in ("optimize", "vacuum")
        },
    }


def _mounts(pod_spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["name"]: m for m in pod_spec["containers"][0]["volumeMounts"]}


def _volumes(pod_spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in pod_spec["volumes"]}


def test_cpu_request_is_core_request_or_cores() -> None:
    default = b.driver_pod(ingestion(), SETTINGS)["spec"]["containers"][0]["resources"]
    assert default["requests"]["cpu"] == "1"
    ing = ingestion(
        driver={"cores": 1, "coreRequest": "250m"},
        executor={"cores": 2, "coreRequest": "0.5", "memory": "2g"},
    )
    driver = b.driver_pod(ing, SETTINGS)["spec"]["containers"][0]["resources"]
    assert driver["requests"]["cpu"] == "250m"
    assert "cpu" not in driver["limits"]  # CPU is never capped
    conf = b.spark_conf(ing, SETTINGS)
    assert conf["spark.kubernetes.executor.request.cores"] == "0.5"
    assert conf["spark.executor.cores"] == "2"  # task slots stay as asked
    assert conf["spark.driver.cores"] == "1"
    # The maintenance jobs are sized like the driver.
    for job in ("optimize", "vacuum"):
        pod = _pod_specs(ing)[job]
        assert pod["containers"][0]["resources"]["requests"]["cpu"] == "250m"
    # Without coreRequest, Spark's default (the executor's cores) applies.
    assert "spark.kubernetes.executor.request.cores" not in b.spark_conf(ingestion(), SETTINGS)


def test_cpu_is_capped_only_where_core_limit_says_so() -> None:
    default = b.spark_conf(ingestion(), SETTINGS)
    assert "spark.kubernetes.executor.limit.cores" not in default
    ing = ingestion(
        driver={"cores": 1, "coreRequest": "250m", "coreLimit": "1"},
        executor={"cores": 2, "coreRequest": "0.5", "coreLimit": "1500m", "memory": "2g"},
    )
    driver = b.driver_pod(ing, SETTINGS)["spec"]["containers"][0]["resources"]
    assert (driver["requests"]["cpu"], driver["limits"]["cpu"]) == ("250m", "1")
    assert driver["limits"]["memory"] == driver["requests"]["memory"]
    conf = b.spark_conf(ing, SETTINGS)
    assert conf["spark.kubernetes.executor.limit.cores"] == "1500m"
    assert conf["spark.executor.cores"] == "2"
    # The maintenance jobs run in the driver's shape, limit included.
    for job in ("optimize", "vacuum"):
        resources = _pod_specs(ing)[job]["containers"][0]["resources"]
        assert resources["limits"]["cpu"] == "1"


def test_a_two_core_node_fits_the_operator_a_driver_and_two_executors() -> None:
    from decimal import Decimal

    def cores(quantity: str) -> Decimal:
        return Decimal(quantity[:-1]) / 1000 if quantity.endswith("m") else Decimal(quantity)

    ing = ingestion(
        driver={"cores": 1, "coreRequest": "500m", "memory": "1g"},
        executor={"cores": 1, "coreRequest": "500m", "memory": "1g"},
        scaling={"minExecutors": 2, "maxExecutors": 2},
    )
    conf = b.spark_conf(ing, SETTINGS)
    driver = cores(
        b.driver_pod(ing, SETTINGS)["spec"]["containers"][0]["resources"]["requests"]["cpu"]
    )
    executors = int(conf["spark.executor.instances"]) * cores(
        conf["spark.kubernetes.executor.request.cores"]
    )
    values = yaml.safe_load((REPO / "charts/deltaflow/values.yaml").read_text())
    operator = values["replicaCount"] * cores(values["resources"]["requests"]["cpu"])
    assert driver + executors + operator <= 2


def test_pvc_volumes_are_mounted_at_the_same_path_in_every_pod() -> None:
    specs = _pod_specs(ingestion(volumes=VOLUMES))
    for kind, pod in specs.items():
        volumes, mounts = _volumes(pod), _mounts(pod)
        assert volumes["lake"] == {
            "name": "lake",
            "persistentVolumeClaim": {"claimName": "lake-pvc"},
        }
        assert volumes["ref"]["persistentVolumeClaim"] == {
            "claimName": "ref-data",
            "readOnly": True,
        }
        assert mounts["lake"] == {"name": "lake", "mountPath": "/lake"}, kind  # writable
        assert mounts["ref"] == {"name": "ref", "mountPath": "/data/ref", "readOnly": True}, kind
        assert len(volumes) == len(pod["volumes"]), f"{kind}: duplicate volume names"
        assert set(mounts) <= set(volumes), kind
    # Without spec.volumes no pod gets a claim.
    for pod in _pod_specs(ingestion()).values():
        assert not any("persistentVolumeClaim" in v for v in pod["volumes"])


def test_every_pod_uses_only_volume_types_the_restricted_standard_allows() -> None:
    ing = ingestion(
        volumes=VOLUMES,
        source={**valid_manifest()["spec"]["source"], "auth": SASL_AUTH},
    )
    for kind, pod in _pod_specs(ing).items():
        for volume in pod["volumes"]:
            types = set(volume) - {"name"}
            assert types <= RESTRICTED_VOLUME_TYPES, (kind, volume)
        _restricted(pod["containers"][0]["securityContext"], pod["securityContext"])


def test_volumes_replace_the_driver_when_they_change() -> None:
    base = b.driver_spec_hash(ingestion(volumes=VOLUMES), SETTINGS)
    assert b.driver_spec_hash(ingestion(volumes=VOLUMES[:1]), SETTINGS) != base
    assert b.driver_spec_hash(ingestion(executor={"coreRequest": "500m"}), SETTINGS) != (
        b.driver_spec_hash(ingestion(), SETTINGS)
    )


def test_executors_get_the_kafka_secrets_the_driver_has() -> None:
    ing = ingestion(source={**valid_manifest()["spec"]["source"], "auth": SASL_AUTH})
    driver, executor = b.driver_pod(ing, SETTINGS)["spec"], b.executor_pod_template(ing)["spec"]
    # Same Secrets, same keys, same paths: the Kafka consumers run on executors and resolve the
    # file references in the options the driver built.
    for name in ("kafka-ca", "kafka-username", "kafka-password"):
        assert _volumes(executor)[name] == _volumes(driver)[name]
        assert _mounts(executor)[name] == _mounts(driver)[name]
    assert _mounts(executor)["kafka-ca"]["mountPath"] == "/etc/deltaflow/kafka-ca"
    # No auth: neither gets any.
    plain = ingestion()
    for pod_spec in (b.executor_pod_template(plain)["spec"], b.driver_pod(plain, SETTINGS)["spec"]):
        assert not any(n.startswith("kafka-") for n in _volumes(pod_spec))


def test_the_runtime_finds_each_secret_where_the_pods_mount_it() -> None:
    from deltaflow_api.v1alpha1 import KafkaSource
    from deltaflow_runtime.kafka_auth import KafkaMaterial

    auth = {
        **SASL_AUTH,
        "clientCertificate": {
            "certificate": {"name": "tls", "key": "tls.crt"},
            "key": {"name": "tls", "key": "tls.key"},
            "keyPassword": {"name": "tls", "key": "pw"},
        },
    }
    ing = ingestion(source={**valid_manifest()["spec"]["source"], "auth": auth})
    source: KafkaSource = ing.spec.source
    material = KafkaMaterial.locate(source, env={})
    assert len(material.files) == 6
    for pod_spec in (b.executor_pod_template(ing)["spec"], b.driver_pod(ing, SETTINGS)["spec"]):
        mounted = {
            f"{_mounts(pod_spec)[name]['mountPath']}/{volume['secret']['items'][0]['path']}"
            for name, volume in _volumes(pod_spec).items()
            if name.startswith("kafka-")
        }
        assert mounted == set(material.files.values())


def test_config_map_holds_no_secret_values_and_no_address_needing_dns() -> None:
    ing = ingestion(source={**valid_manifest()["spec"]["source"], "auth": SASL_AUTH})
    defaults = b.config_map(ing, SETTINGS)["data"]["spark-defaults.conf"]
    settings_lines = [line for line in defaults.splitlines() if not line.startswith("#")]
    keys = {line.split(" ", 1)[0] for line in settings_lines}
    assert "spark.master" not in keys  # the runtime makes it in the pod
    assert "spark.driver.host" not in keys  # the pod's IP, known only in the pod
    assert ".svc" not in defaults
    assert "kubernetes.default" not in defaults
    assert "sasl.jaas.config" not in defaults


def test_driver_pod_carries_its_ip_and_the_in_cluster_master_marker() -> None:
    from deltaflow_runtime import session

    container = b.driver_pod(ingestion(), SETTINGS)["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env[session.ENV_POD_IP]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert env[session.ENV_SPARK_MASTER]["value"] == session.IN_CLUSTER_MASTER
    # The runtime reads the names the builder writes.
    assert (b.ENV_POD_IP, b.ENV_SPARK_MASTER, b.IN_CLUSTER_MASTER) == (
        session.ENV_POD_IP,
        session.ENV_SPARK_MASTER,
        session.IN_CLUSTER_MASTER,
    )


def test_driver_pod_in_a_pod_resolves_master_and_host_without_dns(tmp_path: Path) -> None:
    """What the kubelet gives the driver container (its environment, the ConfigMap's
    spark-defaults.conf as a file), fed to the runtime's Spark conf."""
    from deltaflow_runtime import session

    ing = ingestion()
    container = b.driver_pod(ing, SETTINGS)["spec"]["containers"][0]
    field_values = {"status.podIP": "10.88.0.17", "metadata.name": "orders-driver"}
    env = {
        e["name"]: e["value"]
        if "value" in e
        else field_values[e["valueFrom"]["fieldRef"]["fieldPath"]]
        for e in container["env"]
        if "value" in e or "fieldRef" in e.get("valueFrom", {})
    }
    env |= {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    defaults = tmp_path / "spark-defaults.conf"
    defaults.write_text(b.config_map(ing, SETTINGS)["data"]["spark-defaults.conf"])
    assert env["DELTAFLOW_SPARK_DEFAULTS"] == "/etc/deltaflow/spark/spark-defaults.conf"
    env["DELTAFLOW_SPARK_DEFAULTS"] = str(defaults)  # where this test's kubelet mounted it
    conf = session.runtime_conf(ing, env=env)
    assert conf["spark.master"] == "k8s://https://10.96.0.1:443"
    assert conf["spark.driver.host"] == "10.88.0.17"
    # The operator's properties reach the session (the executors' namespace, image, ...).
    for key, value in b.spark_conf(ing, SETTINGS).items():
        if key not in session.runtime_conf(ing, env={}):  # the runtime's own win, as before
            assert conf[key] == value, key
    # The maintenance jobs run Spark locally: no marker, no Kubernetes master.
    job = maintenance_cronjob(ing, SETTINGS, "vacuum")["spec"]["jobTemplate"]["spec"]["template"]
    job_env = {e["name"] for e in job["spec"]["containers"][0]["env"]}
    assert session.ENV_SPARK_MASTER not in job_env


def test_spec_image_runs_the_driver_executors_and_maintenance_jobs() -> None:
    custom = ingestion(image="registry.example/deltaflow-extra:7")
    pod = b.driver_pod(custom, SETTINGS)
    assert pod["spec"]["containers"][0]["image"] == "registry.example/deltaflow-extra:7"
    conf = b.spark_conf(custom, SETTINGS)
    assert conf["spark.kubernetes.container.image"] == "registry.example/deltaflow-extra:7"
    cron = maintenance_cronjob(custom, SETTINGS, "optimize")
    job_pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert job_pod["containers"][0]["image"] == "registry.example/deltaflow-extra:7"
    # Changing it replaces the driver; leaving it out runs the operator's image.
    assert b.driver_spec_hash(custom, SETTINGS) != b.driver_spec_hash(ingestion(), SETTINGS)
    assert b.driver_pod(ingestion(), SETTINGS)["spec"]["containers"][0]["image"] == SETTINGS.image


@pytest.mark.parametrize("memory", ["2g", "2G", "2Gi", "2048m", "2048M", "2048Mi"])
def test_memory_in_spark_and_kubernetes_forms_means_the_same(memory: str) -> None:
    custom = ingestion(executor={"cores": 1, "memory": memory})
    assert b.spark_conf(custom, SETTINGS)["spark.executor.memory"] == "2048m"
    template = b.executor_pod_template(custom)
    assert template["kind"] == "Pod"
    assert b.memory_with_overhead_mib(custom.spec.executor) == 2048 + 384


PLACEMENT = {
    "labels": {"team": "payments", "app.kubernetes.io/component": "mine"},
    "annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"},
    "nodeSelector": {"node.kubernetes.io/lifecycle": "spot"},
    "tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}],
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                ]
            }
        }
    },
    "priorityClassName": "streaming",
}


def test_pod_placement_reaches_each_roles_pods_and_deltaflows_labels_win() -> None:
    custom = ingestion(
        executor={"cores": 1, "memory": "2g", "pod": PLACEMENT},
        driver={"cores": 1, "memory": "1g", "pod": {"nodeSelector": {"pool": "on-demand"}}},
        imagePullSecrets=[{"name": "registry"}],
        serviceAccount={"annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/x"}},
    )
    template = b.executor_pod_template(custom)
    spec = template["spec"]
    assert spec["nodeSelector"] == {"node.kubernetes.io/lifecycle": "spot"}
    assert spec["tolerations"] == PLACEMENT["tolerations"]
    assert spec["affinity"] == PLACEMENT["affinity"]
    assert spec["priorityClassName"] == "streaming"
    assert spec["imagePullSecrets"] == [{"name": "registry"}]
    assert template["metadata"]["labels"]["team"] == "payments"
    # Deltaflow's labels select the pods: a user label cannot take them over.
    assert template["metadata"]["labels"]["app.kubernetes.io/component"] == "executor"
    assert template["metadata"]["annotations"] == PLACEMENT["annotations"]

    driver = b.driver_pod(custom, SETTINGS)
    assert driver["spec"]["nodeSelector"] == {"pool": "on-demand"}  # its own role's options
    assert "tolerations" not in driver["spec"]
    assert driver["spec"]["imagePullSecrets"] == [{"name": "registry"}]
    assert SPEC_HASH_ANNOTATION in driver["metadata"]["annotations"]
    job = maintenance_cronjob(custom, SETTINGS, "optimize")["spec"]["jobTemplate"]["spec"]
    assert job["template"]["spec"]["nodeSelector"] == {"pool": "on-demand"}
    account = b.service_account(custom, SETTINGS)
    annotations = account["metadata"]["annotations"]
    assert annotations["eks.amazonaws.com/role-arn"] == "arn:aws:iam::1:role/x"
    # Its executors may pull with the stream's pull secret (the admission policy reads this).
    # The pull secret, and the stream's own Spark authentication secret.
    assert annotations[b.EXECUTOR_SECRETS_ANNOTATION].split() == ["orders-spark-auth", "registry"]
    # A placement change gives a new driver (pods cannot be moved).
    assert b.driver_spec_hash(custom, SETTINGS) != b.driver_spec_hash(ingestion(), SETTINGS)


def test_no_placement_adds_no_empty_fields() -> None:
    spec = b.driver_pod(ingestion(), SETTINGS)["spec"]
    for key in ("nodeSelector", "tolerations", "affinity", "priorityClassName", "imagePullSecrets"):
        assert key not in spec


def test_the_spark_secret_file_reaches_a_driver_on_executors_only(tmp_path: Path) -> None:
    """Spark refuses a secret file outside Kubernetes mode: a local-mode driver (no executors
    to share it with) starts without it, one on executor pods with it."""
    from deltaflow_runtime import session

    ing = ingestion()
    defaults = tmp_path / "spark-defaults.conf"
    defaults.write_text(b.config_map(ing, SETTINGS)["data"]["spark-defaults.conf"])
    pod = {"DELTAFLOW_SPARK_DEFAULTS": str(defaults), "KUBERNETES_SERVICE_HOST": "10.96.0.1",
           "KUBERNETES_SERVICE_PORT": "443", "DELTAFLOW_POD_IP": "10.88.0.17"}  # fmt: skip
    on_executors = session.runtime_conf(
        ing, env={**pod, "DELTAFLOW_SPARK_MASTER": b.spark_master(ing)}
    )
    assert on_executors["spark.master"].startswith("k8s://")
    assert on_executors["spark.authenticate.secret.file"] == "/etc/deltaflow/spark-auth/secret"
    local = session.runtime_conf(ing, env={**pod, "DELTAFLOW_SPARK_MASTER": "local[1]"})
    assert local["spark.master"] == "local[1]"
    assert not [k for k in local if k.startswith("spark.authenticate.secret")]
    assert local["spark.authenticate"] == "true"  # still authenticated, with its own secret
