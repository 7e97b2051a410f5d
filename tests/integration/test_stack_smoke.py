"""Each part of the local stack is real: exercised through its own protocol."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from devstack.kafka import KafkaBroker
from devstack.kube import KubeControlPlane, write_kubeconfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    futures[name].result(timeout=30)


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i, value in enumerate(values):
        producer.produce(topic, key=str(i).encode(), value=value)
    assert producer.flush(30) == 0, "some records were not acknowledged by the broker"


def test_kafka_round_trip(kafka: KafkaBroker) -> None:
    topic = f"smoke-{uuid.uuid4().hex[:8]}"
    _create_topic(kafka.bootstrap_servers, topic, partitions=3)
    sent = [f"record-{i}".encode() for i in range(500)]
    _produce(kafka.bootstrap_servers, topic, sent)

    consumer = Consumer(
        {
            "bootstrap.servers": kafka.bootstrap_servers,
            "group.id": f"smoke-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    received: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(received) < len(sent) and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None and msg.value() is not None:
            received.append(msg.value() or b"")
    consumer.close()
    assert sorted(received) == sorted(sent)


def test_kubectl_creates_and_reads_back(kube: KubeControlPlane) -> None:
    kube.kubectl("create", "namespace", "smoke")
    kube.kubectl("-n", "smoke", "create", "configmap", "greeting", "--from-literal=hello=world")
    cm = kube.kubectl_json("-n", "smoke", "get", "configmap", "greeting")
    assert cm["data"] == {"hello": "world"}
    ns = kube.kubectl_json("get", "namespace", "smoke")
    assert ns["status"]["phase"] == "Active"
    version = kube.kubectl_json("version")
    assert version["serverVersion"]["gitVersion"].startswith("v1."), version


def test_rbac_denies_a_service_account_without_bindings(
    kube: KubeControlPlane, tmp_path: Path
) -> None:
    kube.kubectl("create", "namespace", "rbac-smoke")
    kube.kubectl("-n", "rbac-smoke", "create", "serviceaccount", "nobody")
    token = kube.kubectl("-n", "rbac-smoke", "create", "token", "nobody").stdout.strip()
    kubeconfig = tmp_path / "nobody.kubeconfig"
    write_kubeconfig(kubeconfig, kube.server, kube.ca_file, token, user="nobody")

    denied = kube.kubectl("-n", "rbac-smoke", "get", "pods", check=False, kubeconfig=kubeconfig)
    assert denied.returncode != 0
    assert "forbidden" in denied.stderr.lower(), denied.stderr
    assert "system:serviceaccount:rbac-smoke:nobody" in denied.stderr

    # The same identity is allowed once bound: the 403 came from RBAC, not a broken token.
    kube.kubectl(
        "-n", "rbac-smoke", "create", "role", "pod-reader", "--verb=list", "--resource=pods"
    )
    kube.kubectl(
        "-n",
        "rbac-smoke",
        "create",
        "rolebinding",
        "nobody-reads",
        "--role=pod-reader",
        "--serviceaccount=rbac-smoke:nobody",
    )
    deadline = time.monotonic() + 10
    while True:
        allowed = kube.kubectl(
            "-n", "rbac-smoke", "get", "pods", check=False, kubeconfig=kubeconfig
        )
        if allowed.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert allowed.returncode == 0, allowed.stderr


def _pod(name: str, image: str, *, restricted: bool, command: list[str] | None = None) -> str:
    container: dict[str, object] = {
        "name": "main",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": command or ["true"],
    }
    if restricted:
        container["securityContext"] = {
            "runAsNonRoot": True,
            "runAsUser": 1000,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        }
    else:
        container["securityContext"] = {"runAsUser": 0}
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {"containers": [container], "restartPolicy": "Never"},
        }
    )


def test_pod_security_restricted_is_enforced(kube: KubeControlPlane) -> None:
    kube.kubectl("create", "namespace", "psa-smoke")
    kube.kubectl("label", "namespace", "psa-smoke", "pod-security.kubernetes.io/enforce=restricted")
    kube.kubectl("-n", "psa-smoke", "create", "serviceaccount", "default", check=False)

    as_root = _pod("as-root", kube.image, restricted=False)
    rejected = kube.kubectl("-n", "psa-smoke", "apply", "-f", "-", stdin=as_root, check=False)
    assert rejected.returncode != 0
    assert 'violates PodSecurity "restricted' in rejected.stderr, rejected.stderr

    # The compliant pod is admitted and really runs on the node, as the user it asked for.
    compliant = _pod("compliant", kube.image, restricted=True, command=["id", "-u"])
    kube.kubectl("-n", "psa-smoke", "apply", "-f", "-", stdin=compliant)
    _wait_succeeded(kube, "psa-smoke", "compliant")
    assert kube.kubectl("-n", "psa-smoke", "logs", "compliant").stdout.strip() == "1000"


def _wait_succeeded(kube: KubeControlPlane, namespace: str, name: str) -> None:
    deadline = time.monotonic() + 120
    phase = ""
    while time.monotonic() < deadline:
        phase = kube.kubectl_json("-n", namespace, "get", "pod", name)["status"].get("phase", "")
        if phase in ("Succeeded", "Failed"):
            break
        time.sleep(0.5)
    logs = kube.kubectl("-n", namespace, "logs", name, check=False)
    assert phase == "Succeeded", f"pod {name} is {phase}: {logs.stdout}{logs.stderr}"


# Run inside a pod: the API server through the `kubernetes` Service with the pod's own token and
# CA, then Kafka through the broker's listener for pods.
_IN_POD_PROBE = """
import json, os, socket, ssl, sys, urllib.request
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
req = urllib.request.Request(f"https://{host}:{port}/version")
req.add_header("Authorization", "Bearer " + open(f"{sa}/token").read())
ctx = ssl.create_default_context(cafile=f"{sa}/ca.crt")
print(json.load(urllib.request.urlopen(req, context=ctx, timeout=10))["gitVersion"])
kafka_host, kafka_port = sys.argv[1].rsplit(":", 1)
socket.create_connection((kafka_host, int(kafka_port)), timeout=10).close()
print("kafka reachable")
"""


def test_pods_reach_the_api_server_and_kafka(kube: KubeControlPlane, kafka: KafkaBroker) -> None:
    kube.kubectl("create", "namespace", "net-smoke")
    assert kafka.pod_bootstrap_servers is not None
    probe = _pod(
        "probe",
        kube.image,
        restricted=True,
        command=["python3", "-c", _IN_POD_PROBE, kafka.pod_bootstrap_servers],
    )
    kube.kubectl("-n", "net-smoke", "apply", "-f", "-", stdin=probe)
    _wait_succeeded(kube, "net-smoke", "probe")
    out = kube.kubectl("-n", "net-smoke", "logs", "probe").stdout.split()
    assert out == ["v1.36.3", "kafka", "reachable"], out
    # Pods reach the host and each other only: nothing routes or masquerades them off the machine.
    assert Path("/proc/sys/net/ipv4/ip_forward").read_text().strip() == "0"


def test_garbage_collector_removes_dependents(kube: KubeControlPlane) -> None:
    kube.kubectl("create", "namespace", "gc-smoke")
    kube.kubectl("-n", "gc-smoke", "create", "configmap", "owner")
    owner_uid = kube.kubectl_json("-n", "gc-smoke", "get", "configmap", "owner")["metadata"]["uid"]
    dependent = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "dependent",
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner_uid},
            ],
        },
    }
    kube.kubectl("-n", "gc-smoke", "apply", "-f", "-", stdin=json.dumps(dependent))
    kube.kubectl("-n", "gc-smoke", "delete", "configmap", "owner")

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        got = kube.kubectl("-n", "gc-smoke", "get", "configmap", "dependent", check=False)
        if got.returncode != 0 and "NotFound" in got.stderr:
            return
        time.sleep(0.5)
    pytest.fail("the garbage collector did not delete the dependent of a deleted owner in 60s")


def test_helm_installs_a_chart(kube: KubeControlPlane, tmp_path: Path) -> None:
    chart = tmp_path / "smoke-chart"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text(
        "apiVersion: v2\nname: smoke\nversion: 0.1.0\nkubeVersion: '>=1.30.0-0'\n"
    )
    (chart / "templates" / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-cm\n"
        "data:\n  release: {{ .Release.Name | quote }}\n"
    )
    kube.kubectl("create", "namespace", "helm-smoke")
    kube.helm(
        "install", "smoke", str(chart), "--namespace", "helm-smoke", "--wait", "--timeout", "60s"
    )
    releases = json.loads(kube.helm("list", "--namespace", "helm-smoke", "-o", "json").stdout)
    assert [(r["name"], r["status"]) for r in releases] == [("smoke", "deployed")]
    cm = kube.kubectl_json("-n", "helm-smoke", "get", "configmap", "smoke-cm")
    assert cm["data"]["release"] == "smoke"


def test_spark_reads_kafka_and_writes_delta(
    kafka: KafkaBroker, spark: SparkSession, tmp_path: Path
) -> None:
    from deltalake import DeltaTable
    from pyspark.sql import functions as F  # noqa: N812

    topic = f"spark-smoke-{uuid.uuid4().hex[:8]}"
    _create_topic(kafka.bootstrap_servers, topic, partitions=2)
    records = [{"id": i, "amount": i * 1.5} for i in range(200)]
    _produce(kafka.bootstrap_servers, topic, [json.dumps(r).encode() for r in records])

    table = tmp_path / "smoke_table"
    (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
        .select(F.from_json(F.col("value").cast("string"), "id BIGINT, amount DOUBLE").alias("r"))
        .select("r.*")
        .write.format("delta")
        .save(str(table))
    )

    by_spark = {
        (r["id"], r["amount"]) for r in spark.read.format("delta").load(str(table)).collect()
    }
    by_deltalake = {
        (row["id"], row["amount"]) for row in DeltaTable(str(table)).to_pyarrow_table().to_pylist()
    }
    expected = {(r["id"], r["amount"]) for r in records}
    assert by_spark == expected
    assert by_deltalake == expected
