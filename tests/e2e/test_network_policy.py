"""Nobody else in, on the local node: a stream's driver takes Spark's traffic from its own
executors only, Spark answers only holders of the stream's secret, and the driver's own identity
may create and change only its stream's executor pods (the chart's admission policy).

The chart's operator runs as a pod and a DeltaIngestion runs for real (driver and executor pods
from the project's image, tables on the object store), with the NetworkPolicies the operator
applies and the node's enforcer (kube-network-policies, devstack.node) judging every new
connection. Probe pods, also from the project's image, then try what a stranger would:

- from another namespace, even with the stream's executor labels: a TCP connection to the
  driver's RPC and block-manager ports, and to an executor's block manager, gets nowhere, while
  the driver's metrics port answers (the control: the address is reachable, only Spark's ports
  are closed to it);
- from the stream's namespace with the executor labels (what anyone who may create pods there,
  or any pod on a network without policies, could do): the connection opens, and Spark's own
  first call of an executor is refused without the secret, with or without Spark's
  authentication, and answered with it (the control: the same client, the right secret).

Meanwhile the stream keeps landing every record it is given. Tests run in file order and share
the stream.
"""

from __future__ import annotations

import base64
import copy
import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from deltaflow_api import DeltaIngestion
from deltaflow_operator.builders.common import labels, service_account_name
from deltaflow_operator.builders.driver import (
    BLOCK_MANAGER_PORT,
    DRIVER_PORT,
    EXECUTOR_IMAGE_ANNOTATION,
    EXECUTOR_SECRETS_ANNOTATION,
)
from devstack.cluster import lake_credentials
from devstack.demo import cluster_manifest, create_topic, pods, produce_orders, running, table_rows
from devstack.install import REPO_ROOT
from devstack.kafka import KafkaBroker
from devstack.kube import KubeControlPlane
from devstack.minio import ObjectStore
from support.figures import record
from support.image_pod import run_in_image
from support.operator_harness import OPERATOR_NAMESPACE, restricted_namespace, wait_for

NS = "guarded"
OTHER_NS = "elsewhere"
NAME = "payments"
TOPIC = "payments-e2e"
LAKE = "s3a://lake/e2e-netpol"
DRIVER = f"app.kubernetes.io/instance={NAME},app.kubernetes.io/component=driver"
EXECUTORS = f"spark-role=executor,app.kubernetes.io/instance={NAME}"
METRICS_PORT = 8090  # the operator's default runtime metrics port (Settings.runtime_metrics_port)
ENFORCER = "kube-network-policies"
SECRET_ENV = "_SPARK_AUTH_SECRET"  # where Spark would hand executors the secret, without a file
CHART = REPO_ROOT / "charts" / "deltaflow"
# One JSON line per "host:port": "connected", or the error (TimeoutError: a dropped SYN).
TCP_PROBE = """
import json, socket, sys
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect((host, int(port)))
        result = "connected"
    except OSError as error:
        result = type(error).__name__
    finally:
        s.close()
    print(json.dumps({"target": target, "result": result}), flush=True)
"""
RPC_PROBE = (Path(__file__).parents[1] / "support" / "spark_rpc_probe.py").read_text()


@dataclass
class Guarded:
    """The running stream and what the tests need to feed and check it."""

    kube: KubeControlPlane
    kafka: KafkaBroker
    store: ObjectStore
    ingestion: DeltaIngestion
    produced: int = 0

    def produce(self, count: int) -> None:
        produce_orders(self.kafka, TOPIC, count, first_id=self.produced, broken=False)
        self.produced += count

    def wait_landed(self, timeout: float = 300) -> None:
        """Until every record produced so far is in the table (all are valid)."""
        options = self.store.storage_options()
        wait_for(
            f"{self.produced} records in the table",
            lambda: table_rows(f"{LAKE}/{NAME}", options) >= self.produced,
            timeout=timeout,
            interval=2,
        )
        assert table_rows(f"{LAKE}/{NAME}_dead_letter", options) == 0
        assert table_rows(f"{LAKE}/{NAME}", options) == self.produced

    def running(self, selector: str) -> list[dict[str, Any]]:
        found = pods(self.kube, NS, selector)
        return [p for p in found if running(p) and not p["metadata"].get("deletionTimestamp")]

    def ip(self, selector: str) -> str:
        return str(
            wait_for(f"a running {selector}", lambda: self.running(selector), 120)[0]["status"][
                "podIP"
            ]
        )

    def probe(
        self,
        namespace: str,
        name: str,
        pod_labels: dict[str, str],
        args: list[str],
        env: dict[str, str] | None = None,
    ) -> list[dict[str, Any]]:
        """Run ``args`` in a pod of the project's image until it ends; its JSON output lines."""
        run = run_in_image(self.kube, namespace, name, args, pod_labels=pod_labels, env=env)
        assert run.phase == "Succeeded", run.log[-3000:]
        return run.json_lines()

    def tcp(
        self, namespace: str, name: str, pod_labels: dict[str, str], targets: list[str]
    ) -> dict[str, str]:
        lines = self.probe(namespace, name, pod_labels, ["python", "-c", TCP_PROBE, *targets])
        return {line["target"]: line["result"] for line in lines}


@pytest.fixture(scope="module")
def guarded(
    chart_installed: KubeControlPlane, kafka: KafkaBroker, object_store: ObjectStore
) -> Iterator[Guarded]:
    """The chart's operator as one pod and one DeltaIngestion whose pods really run."""
    kube = chart_installed
    assert kube.node is not None
    enforcer = [s for s in kube.node.services if s.name == ENFORCER]
    assert enforcer, "the node runs no NetworkPolicy enforcer"
    assert enforcer[0].alive(), "the node's NetworkPolicy enforcer has stopped"
    # The session's release has no operator pods (the operator-logic tests run their own
    # process); this module runs one, and gives the release back as it found it.
    kube.helm(
        "upgrade", "deltaflow", str(CHART), "--namespace", OPERATOR_NAMESPACE, "--reuse-values",
        "--set=replicaCount=1", "--wait", "--timeout=5m",
    )  # fmt: skip
    restricted_namespace(kube, NS)
    restricted_namespace(kube, OTHER_NS)
    lake_credentials(kube, NS, object_store)
    create_topic(kafka, TOPIC, 2)
    assert kafka.pod_bootstrap_servers is not None
    manifest = cluster_manifest(
        NAME,
        kafka.pod_bootstrap_servers,
        topic=TOPIC,
        trigger="2s",
        namespace=NS,
        storage=object_store.storage_spec(),
        lake=LAKE,
    )
    manifest["spec"]["executor"]["coreLimit"] = "2"  # never throttled on the 2-core node
    kube.kubectl("apply", "-f", "-", stdin=json.dumps(manifest))
    stored = kube.kubectl_json("-n", NS, "get", "deltaingestion", NAME)
    try:
        yield Guarded(kube, kafka, object_store, DeltaIngestion.model_validate(stored))
    finally:
        kube.kubectl("-n", NS, "delete", "deltaingestion", NAME, "--timeout=120s", check=False)
        for namespace in (NS, OTHER_NS):
            kube.kubectl("delete", "namespace", namespace, "--timeout=180s", check=False)
        kube.helm(
            "upgrade", "deltaflow", str(CHART), "--namespace", OPERATOR_NAMESPACE,
            "--reuse-values", "--set=replicaCount=0", "--wait", "--timeout=5m",
        )  # fmt: skip


def test_the_stream_lands_records_through_its_own_executors_with_its_policies_in_force(
    guarded: Guarded,
) -> None:
    kube = guarded.kube
    guarded.produce(2000)
    started = time.monotonic()
    wait_for("the driver pod Running", lambda: guarded.running(DRIVER), timeout=240)
    # Applied with the other children, before the driver pod was created.
    policies = kube.kubectl_json("-n", NS, "get", "networkpolicies")["items"]
    assert sorted(p["metadata"]["name"] for p in policies) == [
        f"{NAME}-driver",
        f"{NAME}-executors",
        f"{NAME}-maintenance",
    ]
    executors = wait_for("an executor pod Running", lambda: guarded.running(EXECUTORS), 240)
    guarded.wait_landed()
    record(f"stream behind NetworkPolicies: 2000 records landed {time.monotonic() - started:.0f}s")

    # The application's secret is the stream's own Secret, a file in its driver and executors:
    # never a value in the executor pod, which every driver of the namespace may read.
    env = {e["name"]: e for e in executors[0]["spec"]["containers"][0].get("env", [])}
    assert SECRET_ENV not in env, env[SECRET_ENV]
    secret = _spark_secret(kube)
    assert len(secret) >= 32, "no authentication secret"
    assert secret not in json.dumps(executors[0]) + json.dumps(guarded.running(DRIVER))
    # Another stream's driver may list pods (Spark's role), never read a Secret.
    other_driver = f"--as=system:serviceaccount:{NS}:{service_account_name('another')}"
    can = kube.kubectl("-n", NS, "auth", "can-i", "get", f"secret/{NAME}-spark-auth",
                       other_driver, check=False)  # fmt: skip
    assert can.stdout.strip() == "no", can.stdout
    defaults = kube.kubectl_json("-n", NS, "get", "configmap", f"{NAME}-config")["data"]
    assert "spark.authenticate true\n" in defaults["spark-defaults.conf"]
    assert "spark.network.crypto.enabled true\n" in defaults["spark-defaults.conf"]
    for kinds in ("configmaps", "events", "deltaingestions"):
        assert secret not in kube.kubectl("get", kinds, "-A", "-o", "json").stdout, kinds
    driver_log = kube.kubectl("-n", NS, "logs", f"{NAME}-driver").stdout
    assert secret not in driver_log


def test_a_pod_of_another_namespace_cannot_open_the_driver_or_executor_ports(
    guarded: Guarded,
) -> None:
    driver, executor = guarded.ip(DRIVER), guarded.ip(EXECUTORS)
    # The stream's own executor labels: only the namespace differs from a real executor.
    results = guarded.tcp(
        OTHER_NS,
        "intruder",
        labels(guarded.ingestion, "executor"),
        [
            f"{driver}:{DRIVER_PORT}",
            f"{driver}:{BLOCK_MANAGER_PORT}",
            f"{executor}:{BLOCK_MANAGER_PORT}",
            f"{driver}:{METRICS_PORT}",
        ],
    )
    assert results == {
        f"{driver}:{DRIVER_PORT}": "TimeoutError",
        f"{driver}:{BLOCK_MANAGER_PORT}": "TimeoutError",
        f"{executor}:{BLOCK_MANAGER_PORT}": "TimeoutError",
        f"{driver}:{METRICS_PORT}": "connected",  # reachable: only Spark's ports are closed
    }, results
    # The stream's own executors kept working meanwhile.
    guarded.produce(1000)
    guarded.wait_landed()


def test_a_process_without_the_streams_secret_cannot_register_as_its_executor(
    guarded: Guarded,
) -> None:
    kube = guarded.kube
    driver = guarded.ip(DRIVER)
    executors = guarded.running(EXECUTORS)
    secret = _spark_secret(kube)  # read as the namespace's admin: the control below
    registered = len(executors)
    # In the stream's namespace with the executor labels, the network lets a pod through ...
    as_executor = labels(guarded.ingestion, "executor")
    opened = guarded.tcp(NS, "knock", as_executor, [f"{driver}:{DRIVER_PORT}"])
    assert opened == {f"{driver}:{DRIVER_PORT}": "connected"}, opened
    # ... and Spark itself refuses the first call an executor makes (does the scheduler it
    # registers with exist?) unless the caller holds the stream's secret.
    answers = guarded.probe(
        NS,
        "rogue-executor",
        as_executor,
        ["python", "-c", RPC_PROBE, driver, str(DRIVER_PORT), "CoarseGrainedScheduler"],
        # The probe's own JVM (py4j) stays small next to the stream's pods.
        env={"PROBE_SECRET": secret, "PYSPARK_SUBMIT_ARGS": "--driver-memory 256m pyspark-shell"},
    )
    by_case = {a["case"]: a for a in answers}
    assert set(by_case) == {"plain", "wrong-secret", "right-secret"}, answers
    assert not by_case["plain"]["answered"]
    assert "Unknown challenge message" in by_case["plain"]["error"], by_case["plain"]
    assert not by_case["wrong-secret"]["answered"], by_case["wrong-secret"]
    assert by_case["right-secret"]["answered"], by_case["right-secret"]  # the control
    # No stranger joined: the driver runs with the executors Spark made for it, and goes on.
    assert len(guarded.running(EXECUTORS)) == registered
    guarded.produce(1000)
    guarded.wait_landed()
    status = kube.kubectl_json("-n", NS, "get", "deltaingestion", NAME)["status"]
    assert status["executors"].get("current") == registered, status["executors"]


def _spark_secret(kube: KubeControlPlane) -> str:
    """The stream's Spark authentication secret as Spark uses it: the file's bytes in base64
    (SecurityManager.secretKeyFromFile), which is how the Secret's data holds them."""
    data = kube.kubectl_json("-n", NS, "get", "secret", f"{NAME}-spark-auth")["data"]
    secret = str(data["secret"])
    assert base64.b64decode(secret)  # not empty
    return secret


def _as_new_pod(pod: dict[str, Any], name: str) -> dict[str, Any]:
    """``pod`` as a request to create another like it (server-set fields dropped)."""
    meta = {k: pod["metadata"][k] for k in ("namespace", "labels", "ownerReferences")}
    spec = {k: v for k, v in pod["spec"].items() if k != "nodeName"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {**meta, "name": name}, "spec": spec}


def _other_secret_volume(pod: dict[str, Any]) -> None:
    pod["spec"]["volumes"].append({"name": "loot", "secret": {"secretName": "other-team"}})


def _token_volume(audience: str | None, extra: list[dict[str, Any]] | None = None) -> Any:
    """A projected ServiceAccount token volume, as a workload identity webhook adds one (EKS
    IRSA: aws-iam-token, audience sts.amazonaws.com), with ``extra`` sources beside it."""

    def change(pod: dict[str, Any]) -> None:
        token: dict[str, Any] = {"path": "token", "expirationSeconds": 86400}
        if audience is not None:
            token["audience"] = audience
        sources = [{"serviceAccountToken": token}, *(extra or [])]
        pod["spec"]["volumes"].append({"name": "aws-iam-token", "projected": {"sources": sources}})
        container = pod["spec"]["containers"][0]
        container.setdefault("env", []).extend(
            [
                {"name": "AWS_ROLE_ARN", "value": "arn:aws:iam::111122223333:role/orders"},
                {"name": "AWS_WEB_IDENTITY_TOKEN_FILE", "value": "/var/run/aws/token"},
            ]
        )
        container.setdefault("volumeMounts", []).append(
            {"name": "aws-iam-token", "mountPath": "/var/run/aws", "readOnly": True}
        )

    return change


def _as_default_with_token(pod: dict[str, Any]) -> None:
    _token_volume("sts.amazonaws.com")(pod)
    pod["spec"]["serviceAccountName"] = "default"
    pod["spec"].pop("serviceAccount", None)


def _other_secret_env(pod: dict[str, Any]) -> None:
    pod["spec"]["containers"][0]["env"].append(
        {"name": "LOOT", "valueFrom": {"secretKeyRef": {"name": "other-team", "key": "k"}}}
    )


def _no_owner(pod: dict[str, Any]) -> None:
    del pod["metadata"]["ownerReferences"]


def _other_stream(pod: dict[str, Any]) -> None:
    pod["metadata"]["labels"]["app.kubernetes.io/instance"] = "ledger"


def _other_image(pod: dict[str, Any]) -> None:
    pod["spec"]["containers"][0]["image"] = "registry.example/miner:1"


def _another_name(pod: dict[str, Any]) -> None:
    pod["metadata"]["name"] = "ledger-driver"  # another stream's driver, while it is away


def _other_account(pod: dict[str, Any]) -> None:
    pod["spec"]["serviceAccountName"] = "ci-deployer"
    pod["spec"]["automountServiceAccountToken"] = True


def _host_network(pod: dict[str, Any]) -> None:
    pod["spec"]["hostNetwork"] = True


def test_the_drivers_identity_may_create_and_change_only_its_own_executors(
    guarded: Guarded,
) -> None:
    """The chart's admission policy on the API server, asked as the driver's ServiceAccount
    (impersonated; every request is a server-side dry run, so it is judged and nothing runs)."""
    kube = guarded.kube
    account = service_account_name(NAME)
    as_driver = f"--as=system:serviceaccount:{NS}:{account}"
    allowance = kube.kubectl_json("-n", NS, "get", "serviceaccount", account)["metadata"][
        "annotations"
    ]
    assert allowance[EXECUTOR_IMAGE_ANNOTATION] == kube.image
    # lake_credentials, and the stream's own Spark authentication secret.
    assert allowance[EXECUTOR_SECRETS_ANNOTATION] == f"lake-creds {NAME}-spark-auth"
    executor = guarded.running(EXECUTORS)[0]
    # The pod Spark made is what the driver may make (the control; the stream runs on it).
    assert executor["spec"]["serviceAccountName"] == account
    kube.kubectl("-n", NS, "create", "serviceaccount", "ci-deployer", check=False)
    kube.kubectl("-n", NS, "create", "secret", "generic", "other-team", "--from-literal=k=v",
                 check=False)  # fmt: skip

    def create(pod: dict[str, Any], *identity: str) -> subprocess.CompletedProcess[str]:
        return kube.kubectl(
            "create", "--dry-run=server", *identity, "-f", "-", stdin=json.dumps(pod), check=False
        )

    def variant(change: Any) -> dict[str, Any]:
        pod = _as_new_pod(copy.deepcopy(executor), f"{NAME}-exec-999")
        change(pod)
        return pod

    assert create(variant(lambda pod: None), as_driver).returncode == 0
    # A workload identity's token (EKS IRSA, EKS Pod Identity), which the cloud's webhook adds
    # to the pods of an annotated ServiceAccount: admitted, as no API server accepts it.
    for audience in ("sts.amazonaws.com", "pods.eks.amazonaws.com"):
        answer = create(variant(_token_volume(audience)), as_driver)
        assert answer.returncode == 0, (audience, answer.stderr)
    refused = {
        "a token for the API server": (_token_volume(None), "workload identity tokens"),
        "a token of another audience": (_token_volume("vault"), "workload identity tokens"),
        "a token beside a ConfigMap": (
            _token_volume("sts.amazonaws.com", [{"configMap": {"name": "kube-root-ca.crt"}}]),
            "workload identity tokens",
        ),
        # The default ServiceAccount's token would be another identity's (its IRSA role).
        "a token as the default ServiceAccount": (
            _as_default_with_token,
            "workload identity tokens",
        ),
        "other Secret as a volume": (_other_secret_volume, "only its stream's Secrets"),
        "other Secret in the environment": (_other_secret_env, "only its stream's Secrets"),
        "not owned by the driver pod": (_no_owner, "owned by its driver pod"),
        "another stream's executor": (_other_stream, "only its own stream's executor pods"),
        "another image": (_other_image, "the stream's image only"),
        "another stream's driver name": (_another_name, "named <stream>-exec-<id>"),
        "another ServiceAccount with a token": (_other_account, "without an API token"),
    }
    for case, (change, words) in refused.items():
        answer = create(variant(change), as_driver)
        assert answer.returncode != 0, f"{case}: admitted"
        assert "ValidatingAdmissionPolicy" in answer.stderr, (case, answer.stderr)
        assert words in answer.stderr, (case, answer.stderr)
    # Pod Security ("restricted" here) refuses the node's namespaces first; the policy refuses
    # them too where a namespace enforces less.
    answer = create(variant(_host_network), as_driver)
    assert answer.returncode != 0
    assert "hostNetwork" in answer.stderr, answer.stderr
    # The policy holds drivers only: the namespace's admin creates what the namespace allows.
    assert create(variant(_other_secret_volume)).returncode == 0
    # Changes: annotations of its own pods, its executors' labels but Deltaflow's, never a spec;
    # deletes: executors only.
    driver_pod = f"{NAME}-driver"
    image_patch = json.dumps({"spec": {"containers": [{"name": "driver", "image": "x:1"}]}})
    executor_pod = executor["metadata"]["name"]
    denied = [
        ("patch", "pod", driver_pod, "-p", image_patch),
        ("delete", "pod", driver_pod),
        # Relabelled as another stream's driver, it would pass that stream's NetworkPolicies.
        ("label", "pod", driver_pod, "app.kubernetes.io/instance=other", "--overwrite"),
        ("label", "pod", driver_pod, "checked=yes"),
        ("label", "pod", executor_pod, "app.kubernetes.io/part-of=other", "--overwrite"),
        ("label", "pod", executor_pod, "app.kubernetes.io/name-"),
        ("label", "pod", executor_pod, "deltaflow.io/role=driver"),
    ]
    for request in denied:
        answer = kube.kubectl("-n", NS, *request, "--dry-run=server", as_driver, check=False)
        assert answer.returncode != 0, request
        assert "ValidatingAdmissionPolicy" in answer.stderr, (request, answer.stderr)
    assert "may not change its own pod's labels" in kube.kubectl(
        "-n", NS, "label", "pod", driver_pod, "app.kubernetes.io/instance=other", "--overwrite",
        "--dry-run=server", as_driver, check=False,
    ).stderr  # fmt: skip
    allowed = [
        ("annotate", "pod", driver_pod, "deltaflow.io/checked=yes"),
        ("label", "pod", executor_pod, "checked=yes"),  # Spark labels its executors
        ("delete", "pod", executor_pod),
    ]
    for request in allowed:
        answer = kube.kubectl("-n", NS, *request, "--dry-run=server", as_driver, check=False)
        assert answer.returncode == 0, (request, answer.stderr)
    guarded.produce(500)
    guarded.wait_landed()
