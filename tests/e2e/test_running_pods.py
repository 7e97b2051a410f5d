"""The whole loop with pods that really run, on the local node, from the project's own image.

The chart's operator Deployment runs as pods; a DeltaIngestion becomes a driver pod whose
executors are pods created by Spark's Kubernetes backend; records go from the real broker through
them into a Delta table on an S3-compatible object store (MinIO, s3a://lake/e2e/...: table,
dead-letter table and checkpoint), which the test reads back from the bucket with deltalake. Every
fault (driver process killed, executor pod deleted, Kafka restarted, operator leader deleted, a
driver replacement, suspend/resume) is followed by the same check: every record the broker holds
is in the table or the dead-letter table exactly once, by (partition, offset). The object store's
secret key must appear nowhere but in its Secret: not in a ConfigMap, a pod spec, an Event, the
status, a CronJob or Job, or a log line of the operator, driver and executor pods.

The tests run in file order and share one stream: each one starts from where the last left it.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import re
import secrets
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from deltaflow_api import DeltaIngestion
from deltaflow_operator.builders.common import RUNTIME_UID
from deltaflow_runtime.kafka_auth import KafkaMaterial, java_properties
from deltaflow_runtime.session import LOCAL_MODE_JAVA_OPTIONS
from devstack.cluster import built_image_id, install_operator, lake_credentials
from devstack.demo import BROKEN, cluster_manifest, create_topic, pods, produce_orders, running
from devstack.kafka import KafkaBroker
from devstack.kube import KubeControlPlane
from devstack.minio import ObjectStore
from support.figures import record
from support.image_pod import run_in_image
from support.manifests import MSK_AUTH, valid_manifest
from support.node_processes import (
    DriverProcessWatch,
    child_argv,
    child_mapped_files,
    driver_processes,
)
from support.operator_harness import OPERATOR_NAMESPACE, wait_for
from support.pod_watch import PodWatch

NS = "lakehouse"
NAME = "orders"
TOPIC = "orders-e2e"
KAFKA_USER = "orders-e2e-reader"
PARTITIONS = 3
DRIVER = f"app.kubernetes.io/instance={NAME},app.kubernetes.io/component=driver"
POOL_PODS = "app.kubernetes.io/component=pool"
EXECUTORS = f"spark-app-selector,spark-role=executor,app.kubernetes.io/instance={NAME}"
REPORT = "deltaflow.io/driver-report"
SPARK_MODE = "deltaflow.io/spark-mode"
# Well past what one executor drains within the 10 s target (a warm one drained 300k in ~10 s,
# so a burst of that size sometimes needed no scale-up).
BURST = 1_000_000
# A local-mode driver (one task thread) with a 3 s lag target: half the burst still outgrows it.
LOCAL_MODE_BURST = 300_000
# A CPU limit the 2-core node never reaches: the executor pods Spark creates carry it, and nothing
# is throttled (executors capped at 500m made every test of this module 1.5-2x slower and the
# driver's capacity figure 100x lower).
EXECUTOR_CORE_LIMIT = "2"
RECONCILE_SECONDS = 2  # the operator's round interval here (the chart's default is longer)
OPERATOR_PODS = "app.kubernetes.io/name=deltaflow,app.kubernetes.io/component=operator"
LAKE = "s3a://lake/e2e"  # the table, the dead-letter table and (by default) the checkpoint
SCALING = {
    "minExecutors": 1,
    "maxExecutors": 3,
    "targetLagSeconds": 10,
    "scaleUpStabilizationSeconds": 0,
    "scaleDownStabilizationSeconds": 20,
}


@dataclass
class Stream:
    """The running stream under test and what the tests need to drive and check it."""

    kube: KubeControlPlane
    kafka: KafkaBroker
    store: ObjectStore
    table: str  # s3a:// URIs, as in the spec
    dead_letter: str
    checkpoint: str
    name: str = NAME
    topic: str = TOPIC
    next_id: int = 0
    produced_broken: int = 0
    timings: dict[str, float] = field(default_factory=dict)
    kafka_password: str = ""  # the stream's SCRAM password (in the Secret kafka-creds only)
    retired_kafka_password: str = ""  # the one it had before the rotation test
    # What the burst test leaves for the check of its scale-down, a few tests later.
    burst: dict[str, Any] = field(default_factory=dict)

    @property
    def driver(self) -> str:
        """The label selector of the stream's driver pod."""
        return f"app.kubernetes.io/instance={self.name},app.kubernetes.io/component=driver"

    def delta(self, uri: str) -> Any:
        """The Delta table at ``uri``, read from the bucket with deltalake."""
        from deltalake import DeltaTable

        return DeltaTable(uri, storage_options=self.store.storage_options())

    def objects(self, uri: str) -> list[str]:
        """Keys of every object under ``uri`` (an s3a:// prefix), listed on the bucket."""
        from pyarrow import fs  # type: ignore[import-untyped]

        selector = fs.FileSelector(uri.removeprefix("s3a://"), recursive=True, allow_not_found=True)
        infos = self.store.filesystem().get_file_info(selector)
        return [i.path for i in infos if i.type == fs.FileType.File]

    def produce(self, count: int, broken: bool = False) -> None:
        """Produce ``count`` new valid orders (and the broken records, if asked)."""
        produce_orders(self.kafka, self.topic, count, first_id=self.next_id, broken=broken)
        self.next_id += count
        self.produced_broken += len(BROKEN) if broken else 0

    def pods(self, selector: str, namespace: str = NS) -> list[dict[str, Any]]:
        """Pods matching ``selector`` that are not being deleted."""
        items = pods(self.kube, namespace, selector)
        return [p for p in items if not p["metadata"].get("deletionTimestamp")]

    def running(self, selector: str, namespace: str = NS) -> list[dict[str, Any]]:
        """Pods matching ``selector`` that run with every container ready."""
        return [p for p in self.pods(selector, namespace) if running(p)]

    def driver_uid(self) -> str | None:
        """The uid of the running driver pod, if one runs."""
        pods = self.running(self.driver)
        return str(pods[0]["metadata"]["uid"]) if pods else None

    def condition(self, type_: str) -> dict[str, Any]:
        """One status condition of the DeltaIngestion ({} if absent)."""
        obj = self.kube.kubectl_json("-n", NS, "get", "deltaingestion", self.name)
        for cond in obj.get("status", {}).get("conditions", []):
            if cond["type"] == type_:
                return dict(cond)
        return {}

    def status(self) -> dict[str, Any]:
        """The DeltaIngestion's status."""
        return dict(self.resource().get("status") or {})

    def resource(self) -> dict[str, Any]:
        """The DeltaIngestion as stored."""
        return dict(self.kube.kubectl_json("-n", NS, "get", "deltaingestion", self.name))

    def report(self) -> dict[str, Any]:
        """The running driver's last autoscaling report (its pod annotation), or {}."""
        pods = self.running(self.driver)
        text = (pods[0]["metadata"].get("annotations") or {}).get(REPORT) if pods else None
        return dict(json.loads(text)) if text else {}

    def events(self, reason: str) -> list[str]:
        """Messages of the DeltaIngestion's Events with ``reason``, oldest first."""
        items = self.kube.kubectl_json(
            "-n",
            NS,
            "get",
            "events",
            f"--field-selector=involvedObject.name={self.name},reason={reason}",
        )["items"]
        items.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
        return [str(e["message"]) for e in items]

    def settled_at_one(self) -> tuple[int] | None:
        """(ScaledUp Events so far,) once one executor is desired, registered and the only pod
        in two reads three operator rounds apart with no ScaledUp between; else None. A round
        posts its Event before it writes the status, so a single read of "desired 1" can fall
        between a warm-up's ScaledUp and its status (a CI run then counted that Event as before
        the burst, and the burst, met by the warm-up's executors, posted none)."""

        def one_executor() -> bool:
            executors = self.status().get("executors", {})
            return (
                len(self.pods(EXECUTORS)) == 1
                and executors.get("desired") == 1
                and executors.get("current") == 1
            )

        ups = len(self.events("ScaledUp"))
        if not one_executor():
            return None
        time.sleep(3 * RECONCILE_SECONDS)
        return (ups,) if one_executor() and len(self.events("ScaledUp")) == ups else None

    def patch(self, spec: dict[str, Any]) -> None:
        """Merge-patch the DeltaIngestion's spec."""
        self.kube.kubectl(
            "-n", NS, "patch", "deltaingestion", self.name, "--type=merge",
            "-p", json.dumps({"spec": spec}),
        )  # fmt: skip

    def log_end_offsets(self) -> dict[int, int]:
        """The broker's log-end offset of each partition of the topic."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(
            {"bootstrap.servers": self.kafka.bootstrap_servers, "group.id": "e2e-check"}
        )
        try:
            return {
                p: consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=10)[1]
                for p in range(PARTITIONS)
            }
        finally:
            consumer.close()

    def landed(self) -> list[tuple[int, int]]:
        """(partition, offset) of every row of the table and the dead-letter table."""
        from deltalake.exceptions import TableNotFoundError

        rows: list[tuple[int, int]] = []
        for uri in (self.table, self.dead_letter):
            try:
                data = self.delta(uri).to_pyarrow_table(
                    columns=["_kafka_partition", "_kafka_offset"]
                )
            except TableNotFoundError:
                continue
            rows += zip(
                data.column("_kafka_partition").to_pylist(),
                data.column("_kafka_offset").to_pylist(),
                strict=True,
            )
        return rows

    def wait_all_landed(self, timeout: float = 240) -> float:
        """Until every record the broker holds has landed; returns the seconds it took."""
        t0 = time.monotonic()
        expected = sum(self.log_end_offsets().values())
        wait_for(
            f"all {expected} records in the table or the dead-letter table",
            lambda: len(self.landed()) >= expected,
            timeout=timeout,
            interval=2,
        )
        return time.monotonic() - t0

    def assert_exactly_once(self) -> None:
        """Every offset the broker holds landed once; nothing else landed."""
        ends = self.log_end_offsets()
        expected = {(p, o) for p, end in ends.items() for o in range(end)}
        landed = self.landed()
        doubled = [k for k, n in Counter(landed).items() if n > 1]
        assert not doubled, f"{len(doubled)} records landed twice, e.g. {doubled[:5]}"
        missing = expected - set(landed)
        assert not missing, f"{len(missing)} records lost, e.g. {sorted(missing)[:5]}"
        assert set(landed) == expected


class Timeline(threading.Thread):
    """Samples, once a second, what the driver reported (its Kafka poll, last batch) and what the
    operator made of it (lag, desired executors, verdict): the story of a scaling test."""

    def __init__(self, stream: Stream) -> None:
        super().__init__(daemon=True)
        self.stream, self.started = stream, time.monotonic()
        self.lines: list[str] = []
        self._done = threading.Event()

    def mark(self, what: str) -> None:
        """Add an event of the test itself (e.g. the burst is produced)."""
        self.lines.append(f"{time.monotonic() - self.started:6.1f}s  -- {what}")

    def run(self) -> None:
        while not self._done.is_set():
            try:
                self.lines.append(self._sample())
            except Exception as error:  # a failed read is part of the story, not a failure
                self.lines.append(f"{time.monotonic() - self.started:6.1f}s  read failed: {error}")
            self._done.wait(1.0)

    def _sample(self) -> str:
        t = time.monotonic() - self.started
        report, status = self.stream.report(), self.stream.status()
        kafka = report.get("kafka") or {}
        end = sum(o for ps in (kafka.get("end") or {}).values() for o in ps.values())
        committed = sum(o for ps in (kafka.get("committed") or {}).values() for o in ps.values())
        auto, executors = status.get("autoscaler") or {}, status.get("executors") or {}
        polled = time.time() - kafka["at"] if "at" in kafka else None
        return (
            f"{t:6.1f}s  driver: poll {'-' if polled is None else f'{polled:.0f}s ago'} "
            f"end {end} committed {committed}{' ' + kafka['error'] if 'error' in kafka else ''}, "
            f"batch {report.get('lastBatch')}, target {report.get('target')} registered "
            f"{report.get('registered')}, capacity {report.get('capacity')} | operator: lag "
            f"{(status.get('lag') or {}).get('records')}, desired {executors.get('desired')}, "
            f"{auto.get('verdict')}: {auto.get('reason')}"
        )

    def stop(self) -> None:
        """Stop sampling (the thread ends within a second)."""
        self._done.set()

    def __str__(self) -> str:
        return "\n".join(self.lines)


@pytest.fixture(scope="module")
def stream(
    chart_installed: KubeControlPlane, kafka: KafkaBroker, object_store: ObjectStore
) -> Iterator[Stream]:
    """The chart's operator as pods, and one DeltaIngestion writing to a table on the object store
    (its keys in the Secret ``lake-creds``, referenced from spec.sink.storage)."""
    kube = chart_installed
    # The session's release has no operator pods (the operator-logic tests run their own
    # process); this module installs the chart for real: helm install --wait, pods Running.
    kube.helm("uninstall", "deltaflow", "--namespace", OPERATOR_NAMESPACE, "--wait")
    install_operator(
        kube,
        OPERATOR_NAMESPACE,
        values={
            "operator.reconcileIntervalSeconds": str(RECONCILE_SECONDS),
            "operator.backoffBaseSeconds": "2",
            "operator.backoffMaxSeconds": "8",
            "operator.driverPendingDeadlineSeconds": "20",
        },
    )
    kube.kubectl("create", "namespace", NS)
    kube.kubectl("label", "namespace", NS, "pod-security.kubernetes.io/enforce=restricted")
    lake_credentials(kube, NS, object_store)
    create_topic(kafka, TOPIC, PARTITIONS)
    # The stream logs in as its own SCRAM-SHA-512 user over TLS (the broker's SASL_SSL listener
    # on the pod network's gateway), holding only the ACLs the README lists; the user name,
    # password and CA reach the driver and executors from the Secret kafka-creds.
    password = secrets.token_urlsafe(18)
    kafka.add_scram_user(KAFKA_USER, "SCRAM-SHA-512", password)
    kafka.grant(KAFKA_USER, topic=TOPIC, group=f"deltaflow.{NS}.{NAME}")
    creds = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "kafka-creds", "namespace": NS},
        "type": "Opaque",
        "stringData": {
            "username": KAFKA_USER,
            "password": password,
            "ca.crt": kafka.ca_file.read_text(),
        },
    }
    kube.kubectl("create", "-f", "-", stdin=json.dumps(creds))  # stdin: on no command line
    manifest = cluster_manifest(
        NAME,
        kafka.sasl_ssl_bootstrap,
        topic=TOPIC,
        trigger="2s",
        namespace=NS,
        storage=object_store.storage_spec(),
        lake=LAKE,
    )
    manifest["spec"]["source"]["auth"] = {
        "securityProtocol": "SASL_SSL",
        "saslMechanism": "SCRAM-SHA-512",
        "username": {"name": "kafka-creds", "key": "username"},
        "password": {"name": "kafka-creds", "key": "password"},
        "caCertificate": {"name": "kafka-creds", "key": "ca.crt"},
    }
    assert "volumes" not in manifest["spec"]  # the pods mount nothing: the tables are in S3
    s = Stream(
        kube,
        kafka,
        object_store,
        table=manifest["spec"]["sink"]["tablePath"],
        dead_letter=manifest["spec"]["deadLetter"]["tablePath"],
        # The operator's default: beside the table, never in it.
        checkpoint=f"{LAKE}/_checkpoints/{NS}/{NAME}",
        kafka_password=password,
    )
    assert s.table == f"{LAKE}/{NAME}"
    assert s.dead_letter == f"{LAKE}/{NAME}_dead_letter"
    # Autoscaling sized for this 2-core node and CI: 1..3 executors (3 partitions), a burst is
    # a backlog past 10 s, and executors go again 20 s after it is gone.
    manifest["spec"]["scaling"] = SCALING
    manifest["spec"]["source"]["maxOffsetsPerTrigger"] = 500_000
    manifest["spec"]["executor"]["coreLimit"] = EXECUTOR_CORE_LIMIT
    s.timings["applied"] = time.monotonic()
    kube.kubectl("apply", "-f", "-", stdin=json.dumps(manifest))
    yield s
    kube.kubectl("delete", "namespace", NS, "--wait=false", check=False)


def test_operator_runs_as_the_charts_deployment(stream: Stream) -> None:
    kube = stream.kube
    kube.kubectl(
        "-n", OPERATOR_NAMESPACE, "rollout", "status", "deployment/deltaflow-operator",
        "--timeout=120s",
    )  # fmt: skip
    pods = stream.running(OPERATOR_PODS, OPERATOR_NAMESPACE)
    assert len(pods) == 2, [p["metadata"]["name"] for p in pods]
    names = [p["metadata"]["name"] for p in pods]

    def holder_pod() -> str | None:
        lease = kube.kubectl_json("-n", OPERATOR_NAMESPACE, "get", "lease", "deltaflow-operator")
        holder = str(lease["spec"].get("holderIdentity") or "")
        return next((n for n in names if holder.startswith(f"{n}-")), None)

    # An earlier operator process may hold the Lease until it expires; then one pod leads.
    leader = wait_for("an operator pod to hold the Lease", holder_pod, timeout=60)
    assert leader in names


def test_records_flow_through_driver_and_executor_pods_exactly_once(stream: Stream) -> None:
    stream.produce(3000, broken=True)
    applied, produced = stream.timings["applied"], time.monotonic()
    driver = wait_for("the driver pod Running", lambda: stream.running(DRIVER), timeout=180)
    t_driver = time.monotonic() - applied
    executors = wait_for(
        "executor pods Running", lambda: stream.running(EXECUTORS), timeout=180, interval=1
    )
    t_executors = time.monotonic() - applied
    # Spark's Kubernetes backend made them, owned by the driver pod: they go when it goes.
    # Every pod runs the image built from the Dockerfile in this run (same config digest).
    built = built_image_id()
    for pod in [*driver, *executors, *stream.running(OPERATOR_PODS, OPERATOR_NAMESPACE)]:
        status = pod["status"]["containerStatuses"][0]
        assert (status["image"], status["imageID"]) == (stream.kube.image, built), status
    for pod in executors:
        owners = pod["metadata"]["ownerReferences"]
        assert [(o["kind"], o["name"]) for o in owners] == [("Pod", f"{NAME}-driver")]
        assert owners[0]["uid"] == driver[0]["metadata"]["uid"]
    wait_for("the first batch", stream.landed, timeout=240, interval=1)
    t_batch = time.monotonic() - applied
    stream.wait_all_landed()
    stream.assert_exactly_once()
    ready = wait_for("Ready=True", lambda: stream.condition("Ready").get("status") == "True")
    assert ready
    # 3 partitions, 3 executors of 1 core at most: the driver reads two tasks per core at
    # maxExecutors (no executor past the partition count is idle).
    log = stream.kube.kubectl("-n", NS, "logs", driver[0]["metadata"]["name"]).stdout
    starting = [
        json.loads(line[line.index("{") :])
        for line in log.splitlines()
        if '"event": "stream_starting"' in line
    ]
    assert [s["minPartitions"] for s in starting] == [2 * SCALING["maxExecutors"]], starting
    record(
        f"kubectl apply -> driver Running {t_driver:.0f}s, executors Running {t_executors:.0f}s, "
        f"first committed batch {t_batch:.0f}s"
    )
    dead = stream.delta(stream.dead_letter).to_pyarrow_table(columns=["reason"])
    reasons = Counter(dead.column("reason").to_pylist())
    assert reasons == Counter(
        {"malformed_json": 1, "schema_mismatch": 1, "tombstone": 1, "invalid_utf8": 1}
    )
    _check_freshness_status(stream, t_batch - (produced - applied), t_batch)
    _check_cost_status(stream)
    # The driver's JVM started from the image's class-data archive (a fifth off its start).
    mapped = child_mapped_files(_driver_main_pid(driver[0]["metadata"]["name"]))
    assert "/opt/deltaflow/share/deltaflow.jsa" in mapped, sorted(mapped)[:20]


def _check_cost_status(stream: Stream) -> None:
    """status.cost from real pods: the executor's JVM reported its CPU and memory through the
    runtime's Spark plugin, and one executor has been held all along."""
    cost = wait_for(
        "status.cost with the executor's figures",
        lambda: (c := stream.status().get("cost") or {}).get("executorMemoryBytes") and c,
        timeout=60,
    )
    assert cost["cpuSecondsPerHour"] > 0, cost
    # One executor (at least) the whole window: 3,600 executor-seconds an hour, a few percent off
    # for the sampling; three at most.
    assert 3000 <= cost["executorSecondsPerHour"] <= 3 * 3600 + 300, cost
    # The cores its tasks keep busy, what spec.placement auto places it by: measured, and of a
    # stream this size a small share of its one executor.
    busy = wait_for("the driver's busy cores", lambda: stream.report().get("busyCores"), timeout=60)
    assert 0 < busy < 1, busy
    assert 100 * 2**20 <= cost["executorMemoryBytes"] <= 3 * 4 * 2**30, cost
    assert 100 * 2**20 <= cost["driverMemoryBytes"] <= 4 * 2**30, cost


def _check_freshness_status(stream: Stream, low: float, high: float) -> None:
    """The records waited for the driver's start: status.freshness shows that wait (between
    ``low`` and ``high`` seconds), from the driver's own measurement, and the Freshness condition
    agrees with it and the target (the example's 30 s)."""
    freshness = wait_for(
        "status.freshness measured",
        lambda: (f := stream.status().get("freshness") or {}).get("p99Seconds") and f,
        timeout=60,
    )
    assert (freshness["triggerSeconds"], freshness["triggerPinned"]) == (2, True), freshness
    assert low - 3 <= freshness["p99Seconds"] <= high + 3, (low, high, freshness)
    assert freshness["p50Seconds"] <= freshness["p99Seconds"]
    assert freshness["records"] >= 3000
    condition = stream.condition("Freshness")
    assert freshness["targetSeconds"] == 30
    on_target = freshness["p99Seconds"] <= freshness["targetSeconds"]
    expected = ("True", "OnTarget") if on_target else ("False", "BehindTarget")
    assert (condition["status"], condition["reason"]) == expected, (condition, freshness)


def _driver_main_pid(pod_name: str) -> int:
    """The host pid of the driver container's main process (`deltaflow stream`)."""
    pids = driver_processes(pod_name)
    assert len(pids) == 1, f"`deltaflow stream` processes of pod {pod_name} on this node: {pids}"
    return pids.pop()


def test_driver_killed_after_a_password_rotation_names_the_secret_and_resumes_once_it_is_fixed(
    stream: Stream,
) -> None:
    old = wait_for("a running driver", stream.driver_uid)
    stream.produce(1500)
    # The broker's password for the stream's user is rotated and the Secret still holds the old
    # one: the running driver keeps its logged-in connections; the next driver cannot log in.
    retired, rotated = stream.kafka_password, secrets.token_urlsafe(18)
    stream.kafka.add_scram_user(KAFKA_USER, "SCRAM-SHA-512", rotated)
    try:
        pid = _driver_main_pid(f"{NAME}-driver")
        # The image's user, as the pods' security context requires: never root on the node.
        uids = next(
            line.split()[1:]
            for line in Path(f"/proc/{pid}/status").read_text().splitlines()
            if line.startswith("Uid:")
        )
        assert set(uids) == {str(RUNTIME_UID)}, uids
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()

        # The replacement's Kafka preflight is refused before Spark starts: Ready names the
        # Secret key to fix and quotes the broker, and the driver waits out a backoff.
        def refused() -> dict[str, dict[str, Any]] | None:
            conditions = {c["type"]: c for c in stream.status().get("conditions", [])}
            ready = conditions.get("Ready", {})
            return conditions if ready.get("reason") == "KafkaAuthenticationFailed" else None

        conditions = wait_for("Ready=False KafkaAuthenticationFailed", refused, timeout=120)
        said = time.monotonic() - killed
        record(f"Kafka password rotated, driver killed -> Ready names the Secret key {said:.0f}s")
        message = conditions["Ready"]["message"]
        assert "spec.source.auth.password (Secret kafka-creds, key password)" in message, message
        assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in message, message
        assert conditions["Progressing"]["reason"] == "BackoffWaiting", conditions["Progressing"]
    finally:
        # The Secret is fixed (replaced from stdin: the password is on no command line and in
        # no last-applied annotation), also when the above failed: later tests need the login.
        creds = stream.kube.kubectl_json("-n", NS, "get", "secret", "kafka-creds")
        creds["data"]["password"] = base64.b64encode(rotated.encode()).decode()
        stream.kube.kubectl("replace", "-f", "-", stdin=json.dumps(creds))
        stream.kafka_password, stream.retired_kafka_password = rotated, retired
    fixed = time.monotonic()
    # The next driver mounts it and resumes from the checkpoint.
    wait_for(
        "a new driver running",
        lambda: (u := stream.driver_uid()) not in (None, old) and u,
        timeout=120,
    )
    stream.produce(1500)
    stream.wait_all_landed()
    record(f"Secret fixed -> all records landed again {time.monotonic() - fixed:.0f}s")
    stream.assert_exactly_once()
    wait_for("Ready=True", lambda: stream.condition("Ready").get("status") == "True", timeout=120)
    restarts = stream.kube.kubectl_json("-n", NS, "get", "deltaingestion", NAME)["status"]
    assert restarts["driver"]["restarts"] >= 2  # the kill, and the refused login


def test_the_images_java_kafka_client_loads_the_msk_iam_login(stream: Stream) -> None:
    # No AWS account is reachable: the image's Java client, with the properties the runtime gives
    # Spark for a stream on MSK with IAM, gets as far as the SASL handshake of the broker's
    # SASL_SSL listener, which does not offer AWS_MSK_IAM. It got there only after the image's
    # jars gave it IAMLoginModule and IAMClientCallbackHandler (a missing class fails earlier).
    manifest = valid_manifest(name=NAME, namespace=NS)
    manifest["spec"]["source"]["auth"] = {
        **MSK_AUTH,
        "caCertificate": {"name": "kafka-creds", "key": "ca.crt"},
    }
    source = DeltaIngestion.model_validate(manifest).spec.source
    ca = "/tmp/kafka-ca/ca.crt"
    props = {
        "bootstrap.servers": stream.kafka.sasl_ssl_bootstrap,
        **java_properties(source, KafkaMaterial({"caCertificate": ca})),
    }
    assert props["sasl.mechanism"] == "AWS_MSK_IAM", props
    lines = "".join(f"{k}={v.replace(chr(92), chr(92) * 2)}\n" for k, v in props.items())
    script = (
        f'mkdir -p {os.path.dirname(ca)} && printf %s "$CA" > {ca} && printf %s "$PROPS" | '
        'java -cp "$SPARK_HOME/jars/*" io.deltaflow.kafka.ConnectCheck /dev/stdin 20000; '
        'echo "{\\"exit\\": \\"$?\\"}"'
    )
    run = run_in_image(
        stream.kube,
        NS,
        "msk-iam-check",
        ["sh", "-c", script],
        env={"CA": stream.kafka.ca_file.read_text(), "PROPS": lines},
    )
    answer, ended = run.json_lines()
    assert ended == {"exit": "1"}, run.log[-3000:]  # the check ran, and did not pass
    assert not any(s in run.log for s in ("ClassNotFound", "NoClassDefFound")), run.log[-3000:]
    assert answer["exceptionClass"] == (
        "org.apache.kafka.common.errors.UnsupportedSaslMechanismException"
    ), answer
    assert answer["message"].startswith("Client SASL mechanism 'AWS_MSK_IAM' not enabled"), answer


def test_deleted_executor_pod_is_replaced_by_spark(stream: Stream) -> None:
    executors = wait_for("executors", lambda: stream.running(EXECUTORS), timeout=120)
    victim = executors[0]["metadata"]["name"]
    driver = stream.driver_uid()
    stream.kube.kubectl("-n", NS, "delete", "pod", victim, "--wait=false")
    deleted = time.monotonic()
    wait_for(
        "Spark's replacement executor Running",
        lambda: [p for p in stream.running(EXECUTORS) if p["metadata"]["name"] != victim],
        timeout=120,
    )
    record(f"executor pod deleted -> replacement Running {time.monotonic() - deleted:.0f}s")
    stream.produce(2000)
    stream.wait_all_landed()
    stream.assert_exactly_once()
    assert stream.driver_uid() == driver  # an executor loss does not restart the driver


def test_kafka_restart(stream: Stream) -> None:
    driver = stream.driver_uid()
    stream.produce(1000)
    restarted = time.monotonic()
    stream.kafka.restart()
    stream.produce(1000)
    stream.wait_all_landed()
    record(f"Kafka restarted -> all records landed {time.monotonic() - restarted:.0f}s")
    stream.assert_exactly_once()
    assert stream.driver_uid() == driver


def test_a_group_the_stream_may_not_commit_to_is_named_on_degraded_while_it_runs(
    stream: Stream,
) -> None:
    # The stream's offsets in its consumer group serve lag tools and KEDA, not the stream: with
    # its Read on the group revoked it runs on (Ready) and Degraded names the group and the
    # grant; a grant clears it within seconds, records or not (the driver retries the group).
    # It runs after test_kafka_restart on purpose: on a restarted broker the driver's admin client
    # timed out on every group commit until it reconnected (kafka_admin.commit_group_offsets).
    group = f"deltaflow.{NS}.{NAME}"
    wait_for("Ready=True", lambda: stream.condition("Ready").get("status") == "True", timeout=120)
    stream.kafka.revoke(KAFKA_USER, group=group)
    revoked = time.monotonic()
    try:
        stream.produce(300)  # its next batch's commit to the group is refused

        def degraded() -> dict[str, dict[str, Any]] | None:
            conditions = {c["type"]: c for c in stream.status().get("conditions", [])}
            reason = conditions.get("Degraded", {}).get("reason")
            return conditions if reason == "KafkaGroupAuthorizationFailed" else None

        try:
            conditions = wait_for("Degraded=True KafkaGroupAuthorizationFailed", degraded, 120)
        except AssertionError as timed_out:
            driver = stream.running(DRIVER)
            log = stream.kube.kubectl("-n", NS, "logs", f"{NAME}-driver", check=False).stdout
            said = [line for line in log.splitlines() if "group" in line.lower()][-20:]
            raise AssertionError(
                f"{timed_out}\nstatus: {stream.status().get('conditions')}\nreport: "
                f"{driver[0]['metadata']['annotations'].get(REPORT) if driver else None}\n"
                f"driver log on the group: {said}"
            ) from None
        said = time.monotonic() - revoked
        message = conditions["Degraded"]["message"]
        assert conditions["Degraded"]["status"] == "True", conditions["Degraded"]
        assert f"may not use Group:{group}" in message, message
        assert "grant it Read on the group" in message, message
        assert "Group authorization failed" in message, message  # the Kafka client's words
        assert conditions["Ready"]["status"] == "True", conditions["Ready"]
    finally:
        stream.kafka.grant(KAFKA_USER, group=group)
    granted = time.monotonic()
    wait_for(
        "Degraded=False after the grant",
        lambda: stream.condition("Degraded").get("status") == "False",
        timeout=120,
    )
    record(
        f"Read on the consumer group revoked -> Degraded names it {said:.0f}s; "
        f"granted -> Degraded=False {time.monotonic() - granted:.0f}s"
    )
    stream.wait_all_landed()
    stream.assert_exactly_once()


def test_a_hung_driver_is_not_ready_while_its_pod_runs(stream: Stream) -> None:
    wait_for("Ready=True", lambda: stream.condition("Ready").get("status") == "True", timeout=120)
    uid = stream.driver_uid()
    pid = _driver_main_pid(f"{NAME}-driver")
    os.kill(pid, signal.SIGSTOP)  # the process hangs: no batch, no report; the pod stays Running
    stopped = time.monotonic()
    try:
        stream.produce(500)
        hung = wait_for(
            "Ready=False DriverNotReporting",
            lambda: (c := stream.condition("Ready")).get("reason") == "DriverNotReporting" and c,
            timeout=90,
        )
        assert hung["status"] == "False"
        record(f"driver process hung -> Ready=False {time.monotonic() - stopped:.0f}s")
        assert stream.driver_uid() == uid  # Running all along: only the report told
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_for("Ready=True again", lambda: stream.condition("Ready").get("status") == "True", 120)
    stream.wait_all_landed()
    stream.assert_exactly_once()


def test_leader_pod_deleted_standby_takes_over_and_suspend_resume_with_real_pods(
    stream: Stream,
) -> None:
    kube = stream.kube
    lease = kube.kubectl_json("-n", OPERATOR_NAMESPACE, "get", "lease", "deltaflow-operator")
    holder = lease["spec"]["holderIdentity"]  # "<pod name>-<random suffix>"
    names = [p["metadata"]["name"] for p in stream.running(OPERATOR_PODS, OPERATOR_NAMESPACE)]
    leader = next(n for n in names if holder.startswith(f"{n}-"))
    kube.kubectl("-n", OPERATOR_NAMESPACE, "delete", "pod", leader, "--wait=false")
    deleted = time.monotonic()

    def new_holder() -> str | None:
        spec = kube.kubectl_json("-n", OPERATOR_NAMESPACE, "get", "lease", "deltaflow-operator")[
            "spec"
        ]
        holder = str(spec.get("holderIdentity") or "")
        return holder if holder and not holder.startswith(leader) else None

    wait_for("another replica to hold the Lease", new_holder, timeout=120, interval=1)
    record(f"leader pod deleted -> standby holds the Lease {time.monotonic() - deleted:.0f}s")

    # The new leader acts: suspend stops the driver and Spark's executors go with it.
    stream.patch({"suspend": True})
    wait_for(
        "driver and executor pods gone",
        lambda: not stream.pods(DRIVER) and not stream.pods(EXECUTORS),
        timeout=180,
    )
    assert stream.condition("Suspended").get("status") == "True"
    stream.produce(1000)
    time.sleep(5)
    assert not stream.pods(DRIVER)  # stays suspended while records arrive
    stream.patch({"suspend": False})
    wait_for("a driver again", stream.driver_uid, timeout=180)
    stream.wait_all_landed()
    stream.assert_exactly_once()


def test_optimize_and_vacuum_jobs_from_the_cronjobs_commit_while_the_stream_appends(
    stream: Stream,
) -> None:
    # Three writers of one table on the bucket, each its own pod and JVM: the stream, and the
    # OPTIMIZE and VACUUM jobs its CronJobs run (S3ConditionalLogStore: one conditional PUT per
    # commit, the loser retries at the next version).
    wait_for("a running driver", stream.driver_uid, timeout=120)
    before = stream.delta(stream.table)
    files_before = len(before.file_uris())
    rows_before = before.to_pyarrow_dataset().count_rows()
    version_before = max(stream.store.delta_commits(stream.table))
    for job in ("optimize", "vacuum"):
        stream.kube.kubectl(
            "-n", NS, "create", "job", f"{job}-now", f"--from=cronjob/{NAME}-{job}"
        )  # fmt: skip
    stream.produce(1000)  # the stream keeps appending while the jobs run
    for job in ("optimize", "vacuum"):
        stream.kube.kubectl(
            "-n", NS, "wait", "--for=condition=Complete", f"job/{job}-now", "--timeout=300s"
        )  # fmt: skip
        pods = stream.kube.kubectl_json("-n", NS, "get", "pods", "-l", f"job-name={job}-now")
        phases = [p["status"]["phase"] for p in pods["items"]]
        failed = [
            p["metadata"]["name"] for p in pods["items"] if p["status"]["phase"] != "Succeeded"
        ]
        said = {
            name: stream.kube.kubectl("-n", NS, "logs", name, check=False).stdout[-3000:]
            for name in failed
        }
        assert phases == ["Succeeded"], (job, said)
    stream.wait_all_landed()
    stream.assert_exactly_once()

    commits = stream.store.delta_commits(stream.table)
    # No version is missing (a lost commit), and each stream batch committed once.
    assert sorted(commits) == list(range(max(commits) + 1))
    operation = {
        v: next(a["commitInfo"]["operation"] for a in actions if "commitInfo" in a)
        for v, actions in commits.items()
    }
    since = [operation[v] for v in sorted(commits) if v > version_before]
    assert since.count("OPTIMIZE") == 1, since
    assert since.count("VACUUM START") == since.count("VACUUM END") == 1, since
    # The stream kept committing (its commits carry its transaction id) while the jobs ran:
    # after the jobs were created and before OPTIMIZE's commit.
    optimized = min(v for v in commits if v > version_before and operation[v] == "OPTIMIZE")
    streamed = {v for v, actions in commits.items() if any("txn" in a for a in actions)}
    assert any(version_before < v < optimized for v in streamed), since
    txns = Counter(
        (a["txn"]["appId"], a["txn"]["version"])
        for actions in commits.values()
        for a in actions
        if "txn" in a
    )
    assert txns
    assert [txn for txn, n in txns.items() if n > 1] == []
    after = stream.delta(stream.table)
    assert after.to_pyarrow_dataset().count_rows() >= rows_before
    assert files_before > PARTITIONS * 2
    assert len(after.file_uris()) < files_before


def test_helm_upgrade_completes_and_the_stream_keeps_running(stream: Stream) -> None:
    driver = wait_for("a running driver", stream.driver_uid, timeout=120)
    stream.kube.helm(
        "upgrade", "deltaflow", str(Path(__file__).parents[2] / "charts" / "deltaflow"),
        "--namespace", OPERATOR_NAMESPACE, "--reuse-values", "--set=operator.logLevel=DEBUG",
        "--wait", "--timeout=5m",
    )  # fmt: skip
    stream.kube.kubectl(
        "-n", OPERATOR_NAMESPACE, "rollout", "status", "deployment/deltaflow-operator",
        "--timeout=120s",
    )  # fmt: skip
    # The chart's own test (a pod on the node): a replica holds and renews the leader Lease.
    # (No --logs: a passed test's pod is deleted at once, by the hook's delete policy.)
    tested = stream.kube.helm(
        "test", "deltaflow", "--namespace", OPERATOR_NAMESPACE, "--timeout=3m"
    ).stdout
    assert re.search(r"TEST SUITE:\s+deltaflow-operator-test", tested), tested
    assert re.search(r"Phase:\s+Succeeded", tested), tested
    assert not re.search(r"Phase:\s+Failed", tested), tested
    # A values mistake is refused before anything changes, naming the key.
    typo = stream.kube.helm(
        "upgrade", "deltaflow", str(Path(__file__).parents[2] / "charts" / "deltaflow"),
        "--namespace", OPERATOR_NAMESPACE, "--reuse-values", "--set=operator.loglevel=DEBUG",
        check=False,
    )  # fmt: skip
    assert typo.returncode != 0
    assert "loglevel" in typo.stderr, typo.stderr
    stream.produce(1000)
    stream.wait_all_landed()
    stream.assert_exactly_once()
    assert stream.driver_uid() == driver  # an operator upgrade does not touch the streams


def test_a_burst_scales_executors_up_live(stream: Stream) -> None:
    """A burst past the lag target: the operator raises the executor count, and the same driver
    pod and query take the new executors on. The way back down (after the scale-down window, only
    idle executors released) is test_the_bursts_executors_go_back_down_live_after_the_window's, a
    few tests on: the tests between leave this stream's executors and scaling alone, so the 20 s
    window passes while they run rather than in a wait of its own."""
    driver = wait_for("a running driver", stream.driver_uid, timeout=120)

    # Capacity is measured from batches that carry records: feed the driver until it has some
    # (a driver that just started runs its first batches only after Spark's start-up).
    def measured() -> dict[str, Any] | None:
        capacity = stream.status().get("autoscaler", {}).get("capacity")
        if not capacity:
            stream.produce(2000)
        return dict(capacity) if capacity else None

    wait_for("the driver's measured capacity in the status", measured, timeout=180, interval=3)
    # The warm-up itself may scale up (capacity is only a lower bound until batches of varied
    # size were seen): wait until the operator has settled back at one executor, so the ScaledUp
    # events counted below are the burst's (a CI run once counted a warm-up 1 -> 2 as "before").
    (ups_before,) = wait_for(
        "one executor, desired and registered, before the burst", stream.settled_at_one, 240
    )
    before = stream.report()
    downs_before = len(stream.events("ScaledDown"))

    timeline = Timeline(stream)
    timeline.start()
    burst, burst_epoch = time.monotonic(), time.time()
    stream.produce(BURST)
    produced = time.monotonic()
    timeline.mark("burst produced")
    try:
        desired = wait_for(
            "the operator to raise the executor target",
            lambda: (d := stream.status().get("executors", {}).get("desired") or 0) > 1 and d,
            timeout=120,
            interval=0.5,
        )
    except AssertionError as error:
        # What the driver polled and the operator decided, second by second, for whoever
        # reads the CI log.
        scaling = stream.condition("Scaling")
        raise AssertionError(f"{error}; Scaling {scaling}\n{timeline}") from None
    finally:
        timeline.stop()
    decided = time.monotonic()
    wait_for(
        f"{desired} executor pods Running and registered with the driver",
        lambda: (
            len(stream.running(EXECUTORS)) >= desired
            and stream.status().get("executors", {}).get("current") == desired
        ),
        timeout=180,
        interval=0.5,
    )
    scaled = time.monotonic()
    limits = {
        p["spec"]["containers"][0]["resources"]["limits"].get("cpu")
        for p in stream.running(EXECUTORS)
    }
    assert limits == {EXECUTOR_CORE_LIMIT}, limits  # spec.executor.coreLimit reached Spark's pods
    stream.wait_all_landed(timeout=600)
    drained = time.monotonic()
    peak = max(desired, stream.status()["executors"]["desired"])
    after = stream.report()
    # Live: the same driver pod and the same query took the executors on; nothing was restarted.
    assert stream.driver_uid() == driver
    assert (after["queryId"], after["runId"]) == (before["queryId"], before["runId"])
    assert after["failedTasks"] == before["failedTasks"] == 0
    ups = stream.events("ScaledUp")[ups_before:]
    assert 1 <= len(ups) <= 2, ups  # sized from measured capacity: one step, two at most
    assert len(set(ups)) == len(ups), f"one scale-up reported twice: {ups}"
    assert "lag" in ups[0], ups[0]
    assert "target 10 s" in ups[0], ups[0]
    stream.assert_exactly_once()
    stream.burst.update(
        driver=driver, before=before, peak=peak, ups_before=ups_before,
        downs_before=downs_before, at=burst_epoch,
    )  # fmt: skip
    record(
        f"autoscaling, burst of {BURST} records (produced in {produced - burst:.0f}s): decision "
        f"{decided - burst:.0f}s -> {desired} executors Running+registered {scaled - burst:.0f}s "
        f"-> all landed {drained - burst:.0f}s; {len(ups)} scale-up action(s); first: {ups[0]}"
    )


def test_a_driver_that_cannot_be_placed_or_pulled_is_degraded_with_the_reason(
    stream: Stream,
) -> None:
    assert stream.kafka.pod_bootstrap_servers is not None

    def manifest(name: str) -> dict[str, Any]:
        return cluster_manifest(
            name,
            str(stream.kafka.pod_bootstrap_servers),
            topic=TOPIC,
            trigger="2s",
            namespace=NS,
            storage=stream.store.storage_spec(),
            lake=LAKE,
        )

    nowhere = manifest("nowhere")
    nowhere["spec"]["driver"]["pod"] = {"nodeSelector": {"deltaflow.io/no-such-pool": "yes"}}
    unpullable = manifest("unpullable")
    unpullable["spec"]["image"] = "deltaflow.local/no-such-image:0"
    # A Secret the spec references does not exist yet (the operator cannot read Secrets: the
    # kubelet's refusal is what it reports, naming the field).
    keyless = manifest("keyless")
    keyless["spec"]["sink"]["storage"]["secretAccessKey"] = {
        "name": "keyless-creds",
        "key": "AWS_SECRET_ACCESS_KEY",
    }
    # A real driver that starts and finds its bucket missing: the runtime's reason, from its
    # termination message, becomes the condition (a restart cannot fix it: NeedsAction).
    bucketless = cluster_manifest(
        "bucketless", str(stream.kafka.pod_bootstrap_servers), topic=TOPIC, trigger="2s",
        namespace=NS, storage=stream.store.storage_spec(), lake="s3a://no-such-bucket-e2e/x",
    )  # fmt: skip
    # Tables on the pod's own disk (file:// on no volume): they would go with the pod, and a
    # replaced driver would start again from startingOffsets. Refused at start, naming them.
    diskless = cluster_manifest(
        "diskless", str(stream.kafka.pod_bootstrap_servers), topic=TOPIC, trigger="2s",
        namespace=NS,
    )  # fmt: skip
    del diskless["spec"]["volumes"]
    try:
        _each_degraded_with_its_reason(stream, nowhere, unpullable, keyless, bucketless)
    finally:  # whatever failed, nothing of it holds the node's room for the tests after
        for name in ("nowhere", "unpullable", "keyless", "bucketless"):
            stream.kube.kubectl(
                "-n", NS, "delete", "deltaingestion", name, "--ignore-not-found", "--timeout=60s"
            )  # fmt: skip
    # Alone once those are gone (its driver exits at start, before any JVM): five drivers at once
    # left the node no room for one of them.
    stream.kube.kubectl("apply", "-f", "-", stdin=json.dumps(diskless))
    try:
        scratch = wait_for(
            "Degraded InvalidSpec", lambda: _degraded(stream, "diskless"), timeout=120
        )
        assert scratch["reason"] == "InvalidSpec", scratch
        message = scratch["message"]
        assert "spec.sink.tablePath: file:///lake/diskless is on no mounted volume" in message
    finally:
        stream.kube.kubectl(
            "-n", NS, "delete", "deltaingestion", "diskless", "--ignore-not-found", "--timeout=60s"
        )  # fmt: skip


def _degraded(stream: Stream, name: str) -> dict[str, Any] | None:
    obj = stream.kube.kubectl_json("-n", NS, "get", "deltaingestion", name)
    found = [c for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == "Degraded"]
    return found[0] if found and found[0]["status"] == "True" else None


def _each_degraded_with_its_reason(stream: Stream, *manifests: dict[str, Any]) -> None:
    """Unschedulable, ImagePullFailed, SecretMissing (running once the Secret exists) and
    BucketNotFound, each naming what to fix."""
    applied = time.monotonic()
    for m in manifests:
        stream.kube.kubectl("apply", "-f", "-", stdin=json.dumps(m))

    def degraded(name: str) -> dict[str, Any] | None:
        return _degraded(stream, name)

    pulled = wait_for("Degraded ImagePullFailed", lambda: degraded("unpullable"), timeout=90)
    assert pulled["reason"] == "ImagePullFailed", pulled
    assert "deltaflow.local/no-such-image:0" in pulled["message"]
    placed = wait_for("Degraded Unschedulable", lambda: degraded("nowhere"), timeout=90)
    seconds = time.monotonic() - applied
    assert placed["reason"] == "Unschedulable", placed
    assert "node affinity/selector" in placed["message"], placed["message"]  # the scheduler's
    assert seconds < 20 + 30, seconds  # the deadline (20 s here) plus a few reconciles
    record(f"unschedulable driver -> Degraded after {seconds:.0f}s (deadline 20s)")
    missing = wait_for("Degraded SecretMissing", lambda: degraded("keyless"), timeout=60)
    assert missing["reason"] == "SecretMissing", missing
    assert "spec.sink.storage.secretAccessKey (Secret" in missing["message"], missing["message"]
    assert "keyless-creds" in missing["message"]
    # Once the Secret exists the kubelet starts the same driver: nothing to re-apply.
    stream.kube.kubectl(
        "-n", NS, "create", "secret", "generic", "keyless-creds",
        f"--from-literal=AWS_SECRET_ACCESS_KEY={stream.store.secret_key}",
    )  # fmt: skip
    created = time.monotonic()
    wait_for(
        "the keyless driver running",
        lambda: (
            stream.kube.kubectl_json("-n", NS, "get", "pod", "keyless-driver")
            .get("status", {})
            .get("phase")
            == "Running"
        ),
        timeout=90,
    )
    record(f"missing Secret created -> driver Running {time.monotonic() - created:.0f}s later")
    bucket = wait_for("Degraded BucketNotFound", lambda: degraded("bucketless"), timeout=180)
    assert bucket["reason"] == "BucketNotFound", bucket
    assert "no-such-bucket-e2e" in bucket["message"], bucket["message"]
    progressing = stream.kube.kubectl_json("-n", NS, "get", "deltaingestion", "bucketless")
    assert {(c["type"], c["reason"]) for c in progressing["status"]["conditions"]} >= {
        ("Progressing", "NeedsAction"),
        ("Ready", "BucketNotFound"),
    }


def test_the_standard_consumer_group_listing_shows_the_streams_lag(stream: Stream) -> None:
    stream.produce(1000)
    stream.wait_all_landed()
    ends = stream.log_end_offsets()

    def listing() -> dict[int, tuple[int, int]] | None:
        out = stream.kafka.consumer_groups("--describe", "--group", f"deltaflow.{NS}.{NAME}")
        # GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG ...
        rows = [cols for cols in map(str.split, out.splitlines()) if cols[1:2] == [TOPIC]]
        parsed = {int(r[2]): (int(r[3]), int(r[5])) for r in rows}
        # CURRENT-OFFSET reaches LOG-END-OFFSET once the last batch committed.
        return parsed if all(parsed.get(p, (-1, -1))[0] == e for p, e in ends.items()) else None

    offsets = wait_for("kafka-consumer-groups to show the stream caught up", listing, timeout=60)
    assert {p: lag for p, (_, lag) in offsets.items()} == dict.fromkeys(ends, 0)


def test_the_bursts_executors_go_back_down_live_after_the_window(stream: Stream) -> None:
    """The burst of test_a_burst_scales_executors_up_live drained, the scale-down window takes the
    stream back to minExecutors on the same driver and query, releasing only idle executors (no
    task failed). It runs a few tests after the burst: those between (degraded drivers of other
    streams, the consumer-group listing) neither scale this stream nor restart its driver, and
    take longer than the window, so the wait below normally finds it done."""
    burst = stream.burst
    # No skip: without the burst's drain there is nothing to check, and that is a failure.
    assert burst, "test_a_burst_scales_executors_up_live did not get to the drain"
    before, peak = burst["before"], burst["peak"]
    wait_for(
        "executors back to minExecutors after the scale-down window",
        lambda: (
            len(stream.pods(EXECUTORS)) == 1
            and stream.status().get("executors", {}).get("current") == 1
        ),
        timeout=240,
        interval=1,
    )
    after = stream.report()
    # Live: the same driver pod and the same query run throughout; nothing was restarted.
    assert stream.driver_uid() == burst["driver"]
    assert (after["queryId"], after["runId"]) == (before["queryId"], before["runId"])
    # Scale-down released only idle executors: no task failed because of it.
    assert after["failedTasks"] == before["failedTasks"] == 0
    assert after["released"] >= before["released"] + peak - 1
    ups = stream.events("ScaledUp")[burst["ups_before"] :]
    downs = stream.events("ScaledDown")[burst["downs_before"] :]
    assert 1 <= len(ups) <= 2, ups  # no scale-up again while the window ran either
    assert len(set(ups)) == len(ups), f"one scale-up reported twice: {ups}"
    assert downs, "no ScaledDown event"
    stream.assert_exactly_once()
    down = max(_event_times(stream, "ScaledDown"))  # the burst's: the latest one
    record(
        f"autoscaling: the burst's executors back to 1 by the ScaledDown {down - burst['at']:.0f}s "
        f"after the burst; {len(downs)} scale-down action(s), 0 task failures; {downs[-1]}"
    )


def _event_times(stream: Stream, reason: str) -> list[float]:
    """When the DeltaIngestion's Events with ``reason`` last happened (epoch seconds)."""
    items = stream.kube.kubectl_json(
        "-n", NS, "get", "events",
        f"--field-selector=involvedObject.name={stream.name},reason={reason}",
    )["items"]  # fmt: skip
    stamps = sorted(e.get("lastTimestamp") or e.get("eventTime") or "" for e in items)
    return [datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp() for t in stamps if t]


def test_kubectl_scale_sets_the_executors_live_in_manual_mode(stream: Stream) -> None:
    kube = stream.kube
    driver = wait_for("a running driver", stream.driver_uid, timeout=120)
    refused = kube.kubectl(
        "-n", NS, "scale", "deltaingestion", NAME, "--replicas=2", check=False
    )  # fmt: skip
    # In mode lag the operator owns the count: the API server says so, naming the field.
    assert refused.returncode != 0
    assert "spec.scaling.executors" in refused.stderr
    assert "manual" in refused.stderr
    stream.patch({"scaling": {"mode": "manual"}})
    kube.kubectl("-n", NS, "scale", "deltaingestion", NAME, "--replicas=2")
    scaled = time.monotonic()
    wait_for(
        "2 executors Running and registered",
        lambda: (
            len(stream.running(EXECUTORS)) == 2
            and stream.status().get("executors", {}).get("current") == 2
        ),
        timeout=180,
    )
    record(f"kubectl scale --replicas=2 -> 2 executors registered {time.monotonic() - scaled:.0f}s")
    scale = kube.kubectl_json("-n", NS, "get", "deltaingestion", NAME, "--subresource=scale")
    assert (scale["spec"]["replicas"], scale["status"]["replicas"]) == (2, 2)
    assert "app.kubernetes.io/component=executor" in scale["status"]["selector"]
    assert stream.driver_uid() == driver
    stream.produce(1000)
    stream.wait_all_landed()
    stream.assert_exactly_once()
    stream.patch({"scaling": {"mode": "lag", "executors": None}})


def _needles(secret: str) -> list[str]:
    """What ``secret`` looks like written out: as is, and base64-encoded at each of the three
    alignments it can have inside a longer encoded value (the characters that depend on its
    bytes alone)."""
    raw = secret.encode()
    encoded = []
    for lead in range(3):  # bytes sharing a base64 group with whatever precedes the value
        body = raw[lead:]
        encoded.append(base64.b64encode(body[: len(body) - len(body) % 3]).decode())
    return [secret, *encoded]


def _leaks(text: str, secret: str) -> list[str]:
    """Lines of ``text`` holding ``secret`` in any of its written-out forms."""
    needles = _needles(secret)
    return [line[:200] for line in text.splitlines() if any(n in line for n in needles)]


def _env_refs(pod_spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """AWS_* variables of a pod spec's containers: name -> its env entry."""
    return {
        e["name"]: e
        for c in [*pod_spec.get("initContainers", []), *pod_spec["containers"]]
        for e in c.get("env", [])
        if e["name"].startswith("AWS_")
    }


def test_no_secret_value_is_in_any_object_event_status_or_log(stream: Stream) -> None:
    # The object store's secret key and the stream's Kafka password (SCRAM over TLS, read by
    # the driver's and the executors' Kafka clients from mounted Secret files).
    kube, secret, kafka_password = stream.kube, stream.store.secret_key, stream.kafka_password
    wait_for("a running driver", stream.driver_uid, timeout=120)
    wait_for("a running executor", lambda: stream.running(EXECUTORS), timeout=120)

    _the_search_finds_them_in_their_secrets(kube, secret, kafka_password)

    # The key reaches the pods only by reference: driver, executors and the maintenance jobs.
    driver = stream.running(DRIVER)[0]
    executor = stream.running(EXECUTORS)[0]
    cronjob = kube.kubectl_json("-n", NS, "get", "cronjob", f"{NAME}-optimize")
    specs = {
        "driver pod": driver["spec"],
        "executor pod": executor["spec"],
        "optimize CronJob": cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"],
    }
    for what, spec in specs.items():
        env = _env_refs(spec)
        assert set(env) >= {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}, (what, env)
        for entry in env.values():
            assert "value" not in entry, (what, entry)
            assert entry["valueFrom"]["secretKeyRef"]["name"] == "lake-creds", (what, entry)

    # Every API object but Secrets: ConfigMaps, pods (env values, annotations), Events, the
    # DeltaIngestion and its status, CronJobs and Jobs by name, and every other listable kind.
    sources: dict[str, str] = {}
    named = {
        "ConfigMaps": "configmaps",
        "pods": "pods",
        "Events": "events",
        "DeltaIngestions (spec and status)": "deltaingestions",
        "CronJobs and Jobs": "cronjobs,jobs",
    }
    for what, kinds in named.items():
        sources[what] = kube.kubectl("get", kinds, "-A", "-o", "json").stdout
    listable = kube.kubectl("api-resources", "--verbs=list", "-o", "name").stdout.split()
    searched = {"secrets", *",".join(named.values()).split(",")}
    others = [k for k in listable if k.split(".")[0] not in searched]
    sources["every other kind"] = kube.kubectl("get", ",".join(others), "-A", "-o", "json").stdout
    status = stream.status()
    assert status.get("conditions"), status  # the status is there to search
    sources["the DeltaIngestion's status"] = json.dumps(status)

    # Logs: the operator's pods (DEBUG since the upgrade), the driver, the executors and the
    # maintenance job, each container and its previous run where there is one; and every log
    # file the node keeps (containers that already exited included).
    logged = 0
    for namespace in (NS, OPERATOR_NAMESPACE):
        for pod in kube.kubectl_json("-n", namespace, "get", "pods")["items"]:
            spec = pod["spec"]
            for container in [*spec.get("initContainers", []), *spec["containers"]]:
                for previous in ((), ("--previous",)):
                    out = kube.kubectl(
                        "-n", namespace, "logs", pod["metadata"]["name"],
                        "-c", container["name"], *previous, check=False,
                    )  # fmt: skip
                    if out.returncode == 0:
                        name = f"log {namespace}/{pod['metadata']['name']}/{container['name']}"
                        sources[name + (" (previous)" if previous else "")] = out.stdout
                        logged += 1
    assert kube.node is not None
    pod_logs = kube.node.work_dir / "pod-logs"
    for path in sorted(pod_logs.rglob("*.log*")):
        if path.is_file():
            raw = path.read_bytes()
            raw = gzip.decompress(raw) if path.name.endswith(".gz") else raw
            sources[f"node log file {path.relative_to(pod_logs)}"] = raw.decode(errors="replace")
    # Something was searched for each role (executors come and go: any executor's log will do).
    for role in ("driver", "exec"):
        assert any(f"{NAME}-{role}" in k and text for k, text in sources.items()), f"no {role} log"
    operator_logs = [
        k for k, t in sources.items() if k.startswith(f"log {OPERATOR_NAMESPACE}/") and t
    ]
    assert len(operator_logs) >= 2, operator_logs

    found = {what: hits for what, text in sources.items() if (hits := _leaks(text, secret))}
    assert not found, f"the secret key is written out in: {found}"
    _assert_kafka_password_only_in_files(sources, specs, kafka_password)
    # The password the Secret held while the broker refused it: the refusal quoted no value.
    if retired := stream.retired_kafka_password:
        found = {w: h for w, t in sources.items() if (h := _leaks(t, retired))}
        assert not found, f"the retired Kafka password is written out in: {found}"
    size = sum(map(len, sources.values()))
    record(
        f"secret key and Kafka password grep: 0 hits in {len(sources)} sources "
        f"({size / 1e6:.1f} MB: ConfigMaps, pods, Events, DeltaIngestions, CronJobs/Jobs, "
        f"{len(others)} other kinds, {logged} container logs, the node's log files); "
        "found in their Secrets (control)"
    )


def _the_search_finds_them_in_their_secrets(
    kube: KubeControlPlane, secret: str, kafka_password: str
) -> None:
    """Positive control: the search finds each value where it does belong, in its Secret (base64
    in the API object, as is once decoded): a leak anywhere else would be found the same way."""
    stored = kube.kubectl("-n", NS, "get", "secret", "lake-creds", "-o", "json").stdout
    data = json.loads(stored)["data"]
    assert base64.b64decode(data["AWS_SECRET_ACCESS_KEY"]).decode() == secret
    assert _leaks(stored, secret), "the search does not find the key in its own Secret"
    decoded = "\n".join(base64.b64decode(v).decode() for v in data.values())
    assert _leaks(decoded, secret)
    kafka_creds = kube.kubectl("-n", NS, "get", "secret", "kafka-creds", "-o", "json").stdout
    assert _leaks(kafka_creds, kafka_password), "the search does not find the Kafka password"


def _assert_kafka_password_only_in_files(
    sources: dict[str, str], specs: dict[str, dict[str, Any]], password: str
) -> None:
    """The Kafka password is in no searched source, and reaches the driver and the executors
    as a mounted Secret file, never as an environment variable."""
    found = {what: hits for what, text in sources.items() if (hits := _leaks(text, password))}
    assert not found, f"the Kafka password is written out in: {found}"
    for what in ("driver pod", "executor pod"):
        spec = specs[what]
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes["kafka-password"]["secret"]["secretName"] == "kafka-creds", what
        env_names = {e["name"] for c in spec["containers"] for e in c.get("env", [])}
        assert not any("KAFKA" in n for n in env_names), (what, env_names)


def _startup_seconds(stream: Stream, pod: str) -> dict[str, float]:
    """The ``startupSeconds`` of a driver pod's ``stream_starting`` log event."""
    log = stream.kube.kubectl("-n", NS, "logs", pod).stdout
    events = [
        json.loads(line[line.index("{") :])
        for line in log.splitlines()
        if '"event": "stream_starting"' in line
    ]
    assert len(events) == 1, log[-3000:]
    return {phase: float(seconds) for phase, seconds in events[0]["startupSeconds"].items()}


def _burst_moves_it_to_executors(stream: Stream) -> None:
    """Produce the burst; wait until it moved the stream to executor pods (failing with what
    the driver reported and the operator decided meanwhile)."""
    timeline = Timeline(stream)
    timeline.start()
    stream.produce(LOCAL_MODE_BURST)
    try:
        wait_for(
            "the burst moved the stream to executor pods",
            lambda: (
                (stream.status().get("placement") or {}).get("mode") == "executors"
                and bool(stream.running(EXECUTORS))
            ),
            timeout=300,
            interval=1,
        )
    except AssertionError as error:
        raise AssertionError(f"{error}\n{timeline}") from None
    finally:
        timeline.stop()


def _trickle_until_measured(stream: Stream, pod: str, batches: int = 8) -> dict[str, Any]:
    """Land trickle batches (700 records each) until the driver's report has a capacity;
    returns that report, or fails with the last one and what the driver logged."""
    report: dict[str, Any] = {}
    for _ in range(batches):
        stream.produce(700)
        stream.wait_all_landed()
        placement = stream.status().get("placement") or {}
        assert placement.get("mode") == "local", (
            f"the trickle moved the stream out of local mode: {placement}, "
            f"moves {stream.events('MovedToExecutors')}"
        )
        report = stream.report()
        if report.get("capacity"):
            return report
    log = stream.kube.kubectl("-n", NS, "logs", pod, check=False).stdout.splitlines()
    said = [line for line in log if "batch_committed" in line or "autoscal" in line][-12:]
    drivers = [p["metadata"]["name"] for p in stream.running(DRIVER)]
    raise AssertionError(
        f"no capacity after {batches} trickle batches; drivers {drivers}, last report {report}, "
        f"its log: {said or log[-20:]}"
    )


def _assert_alone(stream: Stream, driver: str, report: dict[str, Any]) -> None:
    """The local driver ``driver`` is still the stream's, and no executor pod was ever made
    for it nor registered with it."""
    assert not stream.pods(EXECUTORS)
    assert report["registered"] == 0, report
    running = [p["metadata"]["name"] for p in stream.running(DRIVER)]
    moves = stream.events("MovedToExecutors")
    assert running == [driver], f"the local driver was replaced before the burst: {moves}"


def test_a_small_stream_runs_in_its_driver_pod_alone_and_moves_to_executors_for_a_burst(
    stream: Stream,
) -> None:
    """minExecutors 0: Spark in local mode inside the driver pod while the driver alone keeps
    the lag target; a burst moves the stream to executor pods (a new driver from the same
    checkpoint) and, once it is drained and the scale-down window has passed, back. Each move
    is a driver replacement that never overlaps: the old pod terminated gracefully (its batch
    committed) before the new one was created, and on the node the old driver process was gone
    before the new one started."""
    moves = {r: len(stream.events(r)) for r in ("MovedToLocalMode", "MovedToExecutors")}
    first = wait_for("a running driver", stream.driver_uid, timeout=120)
    watch = PodWatch(stream.kube, NS, DRIVER)
    processes = DriverProcessWatch(f"{NAME}-driver")
    wait_for("the driver process seen on the node", lambda: processes.seen, timeout=30)

    def in_local_mode() -> bool:
        placement = stream.status().get("placement") or {}
        drivers = stream.running(DRIVER)
        return (
            placement.get("mode") == "local"
            and bool(drivers)
            and drivers[0]["metadata"]["annotations"].get(SPARK_MODE) == "local"
            and not stream.pods(EXECUTORS)
        )

    try:
        # A 30 s lag target while it trickles: a slow batch on a busy node (one took 14 s in CI)
        # must not move it out before it has measured its capacity. Scaling applies in place.
        stream.patch({"scaling": {"minExecutors": 0, "targetLagSeconds": 30}})
        patched = time.monotonic()
        # One executor carries this stream's trickle: after the scale-down window the autoscaler
        # finds the driver's own task thread enough, and a local-mode driver replaces the old.
        wait_for("the stream in its driver pod alone", in_local_mode, timeout=240, interval=1)
        moved_in = time.monotonic()
        driver = stream.running(DRIVER)[0]
        env = {e["name"]: e.get("value") for e in driver["spec"]["containers"][0]["env"]}
        assert env["DELTAFLOW_SPARK_MASTER"] == "local[1]"  # spec.driver.cores
        # Its JVM compiles with C1 only (a small batch's cost was mostly C2 compiling).
        main_pid = _driver_main_pid(driver["metadata"]["name"])
        jvm = wait_for(  # spark-class is a shell script until it execs the JVM
            "the local driver's JVM on the node",
            lambda: (argv := child_argv(main_pid)) and argv[0].endswith("java") and argv,
            timeout=60,
        )
        assert LOCAL_MODE_JAVA_OPTIONS in jvm, jvm
        # Its trickle until it has a capacity: a driver's first batch starts its capacity meter
        # and the next three measure it (a burst met before that is only drained, the
        # autoscaler holding for want of a measure: a fast node once drained a whole burst so,
        # and never moved).
        measured = _trickle_until_measured(stream, driver["metadata"]["name"])
        _assert_alone(stream, driver["metadata"]["name"], measured)
        # Its log says where its start's time went (a recovery's or a move's cost).
        startup = _startup_seconds(stream, driver["metadata"]["name"])
        assert set(startup) == {
            "interpreter", "kafkaPreflight", "sparkSession", "accessChecks", "guards"
        }, startup  # fmt: skip
        assert all(seconds >= 0 for seconds in startup.values()), startup
        # A 3 s lag target for the burst: its backlog outgrows what the driver alone clears in
        # time whatever this node's speed (at 10 s, a driver that drained fast enough stayed local).
        stream.patch({"scaling": {"targetLagSeconds": 3}})
        burst = time.monotonic()
        _burst_moves_it_to_executors(stream)
        moved_out = time.monotonic()
        stream.wait_all_landed(timeout=600)
        drained = time.monotonic()
        wait_for("back in the driver pod alone", in_local_mode, timeout=300, interval=1)
        back = time.monotonic()
    finally:
        watch.stop()
        processes.stop()
    assert watch.max_alive == 1, watch.events
    assert processes.max_at_once == 1, processes.seen
    assert len(watch.added() - {first}) == 3, watch.events  # into local, out, back in
    stream.assert_exactly_once()
    into_local = stream.events("MovedToLocalMode")[moves["MovedToLocalMode"] :]
    to_executors = stream.events("MovedToExecutors")[moves["MovedToExecutors"] :]
    assert len(into_local) == 2, into_local
    assert len(to_executors) == 1, to_executors
    assert "the driver alone keeps the lag target" in into_local[0], into_local
    assert "executor pod(s)" in to_executors[0], to_executors
    record(
        f"local mode: into the driver pod alone {moved_in - patched:.0f}s after minExecutors 0; "
        f"burst of {LOCAL_MODE_BURST} -> on executor pods {moved_out - burst:.0f}s -> all landed "
        f"{drained - burst:.0f}s -> back in local mode {back - burst:.0f}s; one driver at a time; "
        f"the local driver's query started {sum(startup.values()):.1f}s after its process ("
        + ", ".join(f"{phase} {seconds:.1f}s" for phase, seconds in startup.items())
        + ")"
    )


def _member_events(log: Path, event: str) -> list[float]:
    """When a pool's log (``kubectl logs -f``, saved to ``log``) says ``event`` of this stream
    (epoch seconds; the runtime logs in UTC)."""
    times = []
    for line in log.read_text(errors="replace").splitlines():
        if f'"event": "{event}"' in line and f'"member": "{NS}/{NAME}"' in line:
            stamp = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=UTC)
            times.append(stamp.timestamp())
    return times


def _pooled_stream(stream: Stream, name: str, placement: str = "pooled") -> Stream:
    """A second stream beside ``stream``, in the same namespace and object store, logging in
    to Kafka as ``stream`` does (the same SCRAM user and Secret, granted its own topic and
    group), placed in a pool from its start (it never has a driver of its own):
    spec.placement pooled, or auto (a new stream starts in a pool until its load is
    measured)."""
    topic = f"{name}-e2e"
    create_topic(stream.kafka, topic, PARTITIONS)
    stream.kafka.grant(KAFKA_USER, topic=topic, group=f"deltaflow.{NS}.{name}")
    source = stream.resource()["spec"]["source"]
    manifest = cluster_manifest(
        name,
        source["bootstrapServers"],
        topic=topic,
        trigger="2s",
        namespace=NS,
        storage=stream.store.storage_spec(),
        lake=LAKE,
    )
    manifest["spec"]["source"]["auth"] = source["auth"]
    manifest["spec"]["placement"] = placement
    stream.kube.kubectl("apply", "-f", "-", stdin=json.dumps(manifest))
    return Stream(
        stream.kube,
        stream.kafka,
        stream.store,
        table=f"{LAKE}/{name}",
        dead_letter=f"{LAKE}/{name}_dead_letter",
        checkpoint=f"{LAKE}/_checkpoints/{NS}/{name}",
        name=name,
        topic=topic,
    )


def _in_a_pool(stream: Stream) -> dict[str, Any] | None:
    """The stream's placement once it runs in a pool pod, Ready, with no driver of its own."""
    placement = stream.status().get("placement") or {}
    ready = stream.condition("Ready").get("status") == "True"
    alone = not stream.pods(stream.driver)
    return dict(placement) if placement.get("pool") and ready and alone else None


def _break_next_commit(stream: Stream) -> str:
    """A foreign file where the stream's next Delta commit goes: its next batch fails (as a
    commit another writer made unreadable would). Returns the object's path on the bucket."""
    log = stream.table.removeprefix("s3a://") + "/_delta_log/"
    versions = [int(k.rsplit("/", 1)[1][:20]) for k in stream.objects(f"{stream.table}/_delta_log")
                if k.endswith(".json") and k.rsplit("/", 1)[1][:20].isdigit()]  # fmt: skip
    path = f"{log}{max(versions) + 1:020d}.json"
    with stream.store.filesystem().open_output_stream(path) as out:
        out.write(b"not a Delta commit\n")
    return path


def _one_member_fails_alone(
    stream: Stream, other: Stream, pool: str
) -> tuple[float, dict[str, Any]]:
    """``stream``'s next batch fails in its pool: within 30 s its Ready condition says so,
    naming the pool, while ``other`` commits on; once the cause is gone it resumes by itself.
    Returns how long the condition took, and the condition."""
    foreign = _break_next_commit(stream)
    broke = time.monotonic()
    stream.produce(500)
    other.produce(500)
    failed = wait_for(
        f"{stream.name}'s Ready condition saying it failed in its pool",
        lambda: (
            (c := stream.condition("Ready")).get("status") == "False"
            and pool in c.get("message", "")
            and "failed" in c.get("message", "")
            and c
        ),
        timeout=30,
        interval=0.5,
    )
    said = time.monotonic() - broke
    other.wait_all_landed(timeout=60)
    assert other.condition("Ready").get("status") == "True"
    stream.store.filesystem().delete_file(foreign)
    stream.wait_all_landed(timeout=240)
    wait_for(f"{stream.name} Ready again in its pool", lambda: _in_a_pool(stream), 120, 1)
    return said, failed


def _suspended_and_resumed(member: Stream, other: Stream) -> None:
    """``member`` suspended leaves its pool (stopped there after its batch) while ``other``
    runs on in it; resumed, it joins a pool again."""
    member.patch({"suspend": True})
    wait_for(
        f"{member.name} suspended, out of its pool",
        lambda: (
            member.condition("Suspended").get("status") == "True"
            and (member.status().get("placement") or {}).get("mode") != "pooled"
        ),
        timeout=120,
        interval=1,
    )
    assert "suspended" in member.events("MovedToDriver")[-1]
    assert not member.pods(member.driver)  # suspended: no driver of its own either
    other.produce(500)
    other.wait_all_landed(timeout=60)
    member.patch({"suspend": False})
    wait_for(f"{member.name} back in a pool", lambda: _in_a_pool(member), 120, 1)


def _all_land(streams: tuple[Stream, ...], records: int) -> None:
    """``records`` more to each of ``streams``, all landed."""
    for s in streams:
        s.produce(records)
    for s in streams:
        s.wait_all_landed()


def _listed_as_pooled(stream: Stream, names: tuple[str, ...]) -> None:
    """``kubectl get deltaingestions`` shows each of ``names`` pooled."""
    listing = stream.kube.kubectl("-n", NS, "get", "deltaingestions").stdout.splitlines()
    rows = [line for line in listing[1:] if line.split()[0] in names]
    assert len(rows) == len(names), listing
    assert all("pooled" in line for line in rows), listing


def _pool_holds_credentials_by_reference(stream: Stream, pool: dict[str, Any]) -> None:
    """The pool's pod mounts its members' Kafka Secret as their drivers do; the password is in
    neither the pod nor its members' ConfigMap."""
    mounted = {v["secret"]["secretName"] for v in pool["spec"]["volumes"] if "secret" in v}
    assert mounted == {"kafka-creds"}, pool["spec"]["volumes"]
    name = pool["metadata"]["name"]
    objects = stream.kube.kubectl(
        "-n", NS, "get", f"pod/{name}", f"configmap/{name}", "-o", "json"
    ).stdout  # fmt: skip
    assert stream.kafka_password
    assert stream.kafka_password not in objects


def test_pooled_streams_share_a_pool_pod_each_failing_alone_and_moving_back_exactly_once(
    stream: Stream, tmp_path: Path
) -> None:
    """Two streams share one pool pod, each reading over SCRAM-SHA-512/TLS with the Secret
    kafka-creds (the pool's pod mounts it as their drivers do): ``orders`` (spec.placement
    pooled) after its own driver stopped (after its batch), ``clicks`` (auto: a new stream
    starts in a pool) from its start.
    An error in one's batch puts a condition naming the pool on it within 30 s while the other
    keeps committing; it resumes by itself once the cause is gone. One suspended leaves the
    pool, the other running on; resumed, it joins again (auto remembers where it wants it).
    Back on placement: dedicated, ``orders`` gets a driver of its own once the pool has stopped
    it, the pool running on for ``clicks``; the pool goes with
    its last member. Never two writers: orders starts in the pool after its driver is gone, its
    new driver after the pool logged it stopped. Every record exactly once in both.
    kubectl get shows where each runs; Events say each move."""
    wait_for("a running driver", stream.driver_uid, timeout=120)
    moves = {r: len(stream.events(r)) for r in ("MovedToPool", "MovedToDriver")}
    watch = PodWatch(stream.kube, NS, "app.kubernetes.io/component in (driver,pool)")
    follow: subprocess.Popen[bytes] | None = None
    clicks = _pooled_stream(stream, "clicks", placement="auto")
    try:
        stream.patch({"placement": "pooled"})  # its SCRAM login over TLS goes with it
        placement = wait_for("orders in a pool pod", lambda: _in_a_pool(stream), 300, 1)
        clicks_placement = wait_for("clicks in a pool pod", lambda: _in_a_pool(clicks), 120, 1)
        # One pool for the two; clicks there by auto's decision.
        assert (placement["mode"], clicks_placement["mode"], clicks_placement["pool"]) == (
            "pooled", "pooled", placement["pool"]
        ), (placement, clicks_placement)  # fmt: skip
        assert (clicks_placement["reason"], clicks_placement["wanted"]) == (
            "AutoPlacement", "pooled"
        ), clicks_placement  # fmt: skip
        [pool] = stream.running(POOL_PODS)
        assert pool["metadata"]["name"] == placement["pool"]
        _pool_holds_credentials_by_reference(stream, pool)
        # Its log as it comes: the pool is deleted as soon as its last member has left it.
        pool_log = tmp_path / "pool.log"
        with pool_log.open("w") as sink:
            follow = subprocess.Popen(
                [str(stream.kube.kubectl_bin), "-n", NS, "logs", "-f", placement["pool"]],
                stdout=sink,
                stderr=subprocess.STDOUT,
                env=stream.kube.env(),
            )
        _all_land((stream, clicks), 2000)
        _listed_as_pooled(stream, (NAME, "clicks"))

        # One member's batch fails: it alone says so, the other commits on.
        said, failed = _one_member_fails_alone(stream, clicks, placement["pool"])
        _suspended_and_resumed(clicks, stream)

        stream.patch({"placement": "dedicated"})
        wait_for(
            "orders on a driver of its own again",
            lambda: (
                stream.driver_uid()
                and (stream.status().get("placement") or {}).get("mode") in ("local", "executors")
            ),
            timeout=300,
            interval=1,
        )
        _all_land((stream, clicks), 1000)
        assert stream.running(POOL_PODS), "the pool went while clicks was still its member"
        stream.kube.kubectl("-n", NS, "delete", "deltaingestion", "clicks")
        wait_for("the empty pool gone", lambda: not stream.pods(POOL_PODS), timeout=240)
    finally:
        watch.stop()
        if follow is not None:
            follow.terminate()
            follow.wait(10)
    stream.assert_exactly_once()
    clicks.assert_exactly_once()
    assert stream.kafka_password not in pool_log.read_text(errors="replace")
    started = _member_events(pool_log, "member_started")
    stopped = _member_events(pool_log, "member_stopped")
    assert started, "the pool never logged orders started"
    assert stopped, "the pool never logged orders stopped"
    seen = watch.seen
    driver_gone = min(t for t, kind, _, c in seen if c == "driver" and kind == "DELETED")
    assert driver_gone <= started[0], (started, seen)
    driver_back = max(t for t, kind, _, c in seen if c == "driver" and kind == "ADDED")
    assert stopped[-1] <= driver_back, (stopped, seen)
    assert len(stream.events("MovedToPool")) == moves["MovedToPool"] + 1
    assert len(stream.events("MovedToDriver")) == moves["MovedToDriver"] + 1
    record(
        f"stream pool: orders started in the pool {started[0] - driver_gone:.0f}s after its "
        f"driver was gone; a batch failing in the pool said so in its Ready condition in "
        f"{said:.0f}s ({failed['reason']}) while clicks committed on; orders' own driver back "
        f"{driver_back - stopped[-1]:.0f}s after the pool stopped it"
    )


def test_delete_and_uninstall_leave_no_pod_and_keep_the_table(stream: Stream) -> None:
    rows = stream.delta(stream.table).to_pyarrow_dataset().count_rows()
    stream.kube.kubectl("-n", NS, "delete", "deltaingestion", NAME, "--timeout=120s")

    def left() -> list[str]:
        pods = stream.kube.kubectl_json("-n", NS, "get", "pods")["items"]
        return [f"{p['metadata']['name']} ({p['status'].get('phase')})" for p in pods]

    try:
        wait_for("no driver or executor pod left", lambda: not left(), timeout=180)
    except AssertionError as error:
        raise AssertionError(f"{error}; still there: {left()}") from None
    assert stream.delta(stream.table).to_pyarrow_dataset().count_rows() == rows
    # The tables and the checkpoint stay in the bucket; with no writer left, they stay as they are.
    stored = (stream.table, stream.dead_letter, stream.checkpoint)
    objects = {uri: sorted(stream.objects(uri)) for uri in stored}
    assert all(objects.values()), {uri: len(keys) for uri, keys in objects.items()}
    assert any("/_delta_log/" in key for key in objects[stream.table])
    assert any("/offsets/" in key for key in objects[stream.checkpoint])
    stream.kube.helm("uninstall", "deltaflow", "--namespace", OPERATOR_NAMESPACE, "--wait")
    wait_for(
        "no operator pod left",
        lambda: (
            not stream.kube.kubectl_json(
                "-n", OPERATOR_NAMESPACE, "get", "pods", "-l", OPERATOR_PODS
            )["items"]
        ),
        timeout=120,
    )
    assert stream.delta(stream.table).to_pyarrow_dataset().count_rows() == rows
    assert {uri: sorted(stream.objects(uri)) for uri in stored} == objects
