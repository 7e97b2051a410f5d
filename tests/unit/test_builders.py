"""Builders: a DeltaIngestion in, manifests out; checked without a cluster."""

from __future__ import annotations

from typing import Any

import yaml

from deltaflow_operator.api import DeltaIngestion
from deltaflow_operator.builders import driver as b
from deltaflow_operator.builders.common import SPEC_HASH_ANNOTATION
from deltaflow_operator.builders.maintenance import maintenance_cronjob
from deltaflow_operator.settings import Settings
from support.manifests import valid_manifest

SETTINGS = Settings(image="deltaflow:1.2.3")


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
    assert spec["serviceAccountName"] == "orders-spark"
    assert container["image"] == "deltaflow:1.2.3"
    assert container["args"] == ["stream", "--config", "/etc/deltaflow/ingestion.yaml"]
    env = {e["name"]: e for e in container["env"]}
    assert env["SPARK_CONF_DIR"]["value"] == "/etc/deltaflow/spark"
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
    assert env["DELTAFLOW_KAFKA_PASSWORD"] == {
        "name": "DELTAFLOW_KAFKA_PASSWORD",
        "valueFrom": {"secretKeyRef": {"name": "kc", "key": "p"}},
    }
    assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"] == {
        "secretKeyRef": {"name": "lake", "key": "secret"}
    }
    assert all(
        "value" not in e for n, e in env.items() if n.startswith(("DELTAFLOW_KAFKA", "AWS_"))
    )
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["kafka-ca"]["secret"] == {
        "secretName": "kca",
        "items": [{"key": "ca.pem", "path": "ca.crt"}],
    }
    conf = b.spark_conf(ing, SETTINGS)
    assert conf["spark.kubernetes.executor.secretKeyRef.AWS_SECRET_ACCESS_KEY"] == "lake:secret"
    assert set(b.secret_refs(ing)) == {
        "spec.source.auth.username",
        "spec.source.auth.password",
        "spec.source.auth.caCertificate",
        "spec.sink.storage.accessKeyId",
        "spec.sink.storage.secretAccessKey",
    }


def test_spark_conf_runs_client_mode_against_kubernetes() -> None:
    conf = b.spark_conf(ingestion(sparkConf={"spark.sql.shuffle.partitions": "16"}), SETTINGS)
    assert conf["spark.master"] == "k8s://https://kubernetes.default.svc:443"
    assert conf["spark.submit.deployMode"] == "client"
    assert (
        conf["spark.kubernetes.driver.pod.name"] == "orders-driver"
    )  # executors owned by the driver
    assert conf["spark.driver.host"] == "orders-driver.data.svc"
    assert conf["spark.executor.memory"] == "2g"
    assert conf["spark.executor.instances"] == "1"
    assert conf["spark.sql.shuffle.partitions"] == "16"
    template = b.executor_pod_template(ingestion())
    _restricted(
        template["spec"]["containers"][0]["securityContext"], template["spec"]["securityContext"]
    )
    assert template["spec"]["automountServiceAccountToken"] is False


def test_driver_role_is_namespaced_and_has_no_secret_access() -> None:
    role = b.role(ingestion())
    assert role["kind"] == "Role"
    assert role["metadata"]["namespace"] == "data"
    resources = {r for rule in role["rules"] for r in rule["resources"]}
    assert resources == {"pods", "configmaps"}
    binding = b.role_binding(ingestion())
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "orders-spark", "namespace": "data"}
    ]


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
