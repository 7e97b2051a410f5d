"""Nobody else in: Spark's authentication and encryption as the operator and the runtime set them,
and the NetworkPolicies that select exactly the pods the other builders label. Pure: manifests
and properties in, checked without a cluster (tests/e2e/test_network_policy.py proves them on
the node)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from deltaflow_api import DeltaIngestion
from deltaflow_operator.builders import driver as b
from deltaflow_operator.builders.maintenance import JOBS, maintenance_cronjob
from deltaflow_operator.builders.network_policy import network_policies
from deltaflow_operator.reconcile import children
from deltaflow_operator.settings import Settings
from deltaflow_runtime.session import runtime_conf
from support.manifests import valid_manifest

SETTINGS = Settings(image="deltaflow:1.2.3")
K8S_POD_ENV = {
    "DELTAFLOW_SPARK_MASTER": "k8s://in-cluster",
    "KUBERNETES_SERVICE_HOST": "10.0.0.1",
    "KUBERNETES_SERVICE_PORT": "443",
    "DELTAFLOW_POD_IP": "10.244.0.7",
}
# What a spec stored before admission refused these keys could still hold.
HOSTILE_CONF = {
    "spark.authenticate": "false",
    "spark.network.crypto.enabled": "false",
    "spark.network.crypto.cipher": "AES/CTR/NoPadding",
    "spark.network.crypto.saslFallback": "true",
    "spark.ui.enabled": "true",
    "spark.driver.port": "9999",
    "spark.blockManager.port": "0",
}


def ingestion(name: str = "orders", spark_conf: dict[str, str] | None = None) -> DeltaIngestion:
    """A stream; ``spark_conf`` is set without validation, as a resource stored before admission
    refused its keys would hold it."""
    m = valid_manifest(name=name)
    m["metadata"].update(uid="0000-1111", generation=3)
    ing = DeltaIngestion.model_validate(m)
    if spark_conf is None:
        return ing
    return ing.model_copy(update={"spec": ing.spec.model_copy(update={"spark_conf": spark_conf})})


def _defaults(ing: DeltaIngestion) -> dict[str, str]:
    """spark-defaults.conf of the ConfigMap, as Spark reads it."""
    text = b.config_map(ing, SETTINGS)["data"]["spark-defaults.conf"]
    lines = [line.partition(" ") for line in text.splitlines() if line and line[0] != "#"]
    return {key: value for key, _, value in lines}


@pytest.mark.parametrize("spark_conf", [{}, HOSTILE_CONF])
def test_the_driver_and_executors_authenticate_and_encrypt_whatever_spark_conf_says(
    spark_conf: dict[str, str],
) -> None:
    ing = ingestion(spark_conf=spark_conf)
    # The file the driver starts with, and the session the runtime builds on top of it in the pod.
    for conf in (_defaults(ing), runtime_conf(ing, env=K8S_POD_ENV)):
        assert conf["spark.authenticate"] == "true"
        assert conf["spark.network.crypto.enabled"] == "true"
        assert conf["spark.network.crypto.cipher"] == "AES/GCM/NoPadding"
        assert conf["spark.network.crypto.authEngineVersion"] == "2"
        assert conf["spark.network.crypto.saslFallback"] == "false"
        assert conf["spark.ui.enabled"] == "false"
        assert conf["spark.driver.port"] == str(b.DRIVER_PORT)
        assert conf["spark.driver.blockManager.port"] == str(b.BLOCK_MANAGER_PORT)
        assert conf["spark.blockManager.port"] == str(b.BLOCK_MANAGER_PORT)
        # Spark makes the secret itself and hands it to its executors: never in the ConfigMap.
        assert "spark.authenticate.secret" not in conf


def test_local_runs_and_maintenance_jobs_keep_their_own_network_settings() -> None:
    # Spark in local mode has no executors to authenticate; nothing is forced on it.
    conf = runtime_conf(ingestion(), master="local[2]", env={})
    assert "spark.authenticate" not in conf
    assert "spark.blockManager.port" not in conf


def test_the_driver_pod_opens_no_ui_port() -> None:
    pod = b.driver_pod(ingestion(), SETTINGS)
    ports = {p["name"]: p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]}
    assert ports == {
        "driver-rpc": b.DRIVER_PORT,
        "blockmanager": b.BLOCK_MANAGER_PORT,
        "metrics": SETTINGS.runtime_metrics_port,
    }


def test_a_driver_of_an_operator_without_authentication_is_replaced_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The hash its pod carries covers the network settings: an older driver (random executor
    # block-manager ports, no authentication) no longer matches and is replaced.
    now = b.driver_spec_hash(ingestion(), SETTINGS)
    monkeypatch.delitem(b.NETWORK_CONF, "spark.authenticate")
    assert b.driver_spec_hash(ingestion(), SETTINGS) != now


def _matches(selector: dict[str, Any], pod_labels: dict[str, str]) -> bool:
    """A LabelSelector (matchLabels, matchExpressions with In) against a pod's labels."""
    if any(pod_labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expr in selector.get("matchExpressions", []):
        assert expr["operator"] == "In", expr
        if pod_labels.get(expr["key"]) not in expr["values"]:
            return False
    return True


def _pods(ing: DeltaIngestion) -> dict[str, dict[str, str]]:
    """The labels of every pod of the stream, by role, as the builders (and Spark) make them."""
    conf = b.spark_conf(ing, SETTINGS)
    template = yaml.safe_load(b.config_map(ing, SETTINGS)["data"]["executor-pod-template.yaml"])
    prefix = "spark.kubernetes.executor.label."
    spark_labels = {k.removeprefix(prefix): v for k, v in conf.items() if k.startswith(prefix)}
    pods = {
        "driver": b.driver_pod(ing, SETTINGS)["metadata"]["labels"],
        # Spark puts the template's labels and its own on the executor pods it creates.
        "executor": {**template["metadata"]["labels"], **spark_labels, "spark-role": "executor"},
    }
    for job in JOBS:
        cronjob = maintenance_cronjob(ing, SETTINGS, job)
        pods[job] = cronjob["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]
    return pods


def _policy(ing: DeltaIngestion, settings: Settings, selects: str) -> dict[str, Any]:
    pods = _pods(ing)
    chosen = [
        p
        for p in network_policies(ing, settings)
        if _matches(p["spec"]["podSelector"], pods[selects])
    ]
    assert len(chosen) == 1, f"{len(chosen)} policies select the {selects} pod"
    return chosen[0]


def _allowed(policy: dict[str, Any], source: dict[str, str] | None, port: int) -> bool:
    """Whether ``policy`` lets a pod of the stream's namespace with labels ``source`` (None: a
    pod of another namespace, or anything off the cluster) open TCP ``port``."""
    for rule in policy["spec"]["ingress"]:
        if not any(p["port"] == port and p["protocol"] == "TCP" for p in rule["ports"]):
            continue
        peers = rule.get("from")
        if peers is None:
            return True
        for peer in peers:
            assert set(peer) == {"podSelector"}, peer  # same namespace only, no ipBlock
            if source is not None and _matches(peer["podSelector"], source):
                return True
    return False


@pytest.mark.parametrize(
    "spark_conf", [{}, {"spark.driver.port": "9999", "spark.blockManager.port": "0"}]
)
def test_the_driver_takes_spark_traffic_from_its_own_executors_only(
    spark_conf: dict[str, str],
) -> None:
    ing = ingestion(spark_conf=spark_conf)
    pods = _pods(ing)
    policy = _policy(ing, SETTINGS, "driver")
    assert policy["spec"]["policyTypes"] == ["Ingress"]  # egress: brokers, store, API server
    conf = b.spark_conf(ing, SETTINGS)
    spark_ports = {int(conf["spark.driver.port"]), int(conf["spark.driver.blockManager.port"])}
    assert spark_ports == {b.DRIVER_PORT, b.BLOCK_MANAGER_PORT}
    other_stream = _pods(ingestion("clicks"))
    for port in spark_ports:
        assert _allowed(policy, pods["executor"], port)
        assert not _allowed(policy, None, port)  # another namespace
        assert not _allowed(policy, {"app": "anything"}, port)
        assert not _allowed(policy, other_stream["executor"], port)  # another stream's executor
        for job in JOBS:
            assert not _allowed(policy, pods[job], port)
    assert not _allowed(policy, pods["executor"], 4040)  # no UI, no other port
    # Metrics: anyone, unless the operator is told who scrapes.
    assert _allowed(policy, None, SETTINGS.runtime_metrics_port)


def test_the_metrics_port_takes_only_the_scrapers_the_operator_is_told_of() -> None:
    scrapers = '[{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}]'
    settings = Settings.from_env({"DELTAFLOW_DRIVER_METRICS_FROM": scrapers})
    policy = _policy(ingestion(), settings, "driver")
    metrics = [r for r in policy["spec"]["ingress"] if r["ports"][0]["port"] == 8090]
    assert metrics == [
        {
            "ports": [{"protocol": "TCP", "port": 8090}],
            "from": [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}],
        }
    ]
    with pytest.raises(ValueError, match="DELTAFLOW_DRIVER_METRICS_FROM"):
        Settings.from_env({"DELTAFLOW_DRIVER_METRICS_FROM": '{"podSelector": {}}'})
    assert Settings.from_env({"DELTAFLOW_DRIVER_METRICS_FROM": "[]"}).driver_metrics_from == ""


def test_executors_take_block_traffic_from_their_driver_and_each_other_only() -> None:
    ing = ingestion()
    pods = _pods(ing)
    policy = _policy(ing, SETTINGS, "executor")
    assert _allowed(policy, pods["driver"], b.BLOCK_MANAGER_PORT)
    assert _allowed(policy, pods["executor"], b.BLOCK_MANAGER_PORT)
    assert not _allowed(policy, None, b.BLOCK_MANAGER_PORT)
    assert not _allowed(policy, pods["optimize"], b.BLOCK_MANAGER_PORT)
    assert not _allowed(policy, pods["driver"], b.DRIVER_PORT)  # executors serve no RPC


def test_maintenance_jobs_take_nothing() -> None:
    ing = ingestion()
    for job in JOBS:
        policy = _policy(ing, SETTINGS, job)
        assert policy["spec"] == {**policy["spec"], "policyTypes": ["Ingress"], "ingress": []}


def test_the_policies_are_owned_children_applied_before_the_driver_exists() -> None:
    ing = ingestion()
    applied = children(ing, SETTINGS)
    kinds = [c["kind"] for c in applied]
    # The driver pod is created after every child: it never runs without its policy.
    assert kinds[:3] == ["NetworkPolicy"] * 3
    names = sorted(c["metadata"]["name"] for c in applied if c["kind"] == "NetworkPolicy")
    assert names == ["orders-driver", "orders-executors", "orders-maintenance"]
    for policy in applied[:3]:
        assert policy["metadata"]["namespace"] == ing.namespace
        assert policy["metadata"]["ownerReferences"][0]["uid"] == "0000-1111"
