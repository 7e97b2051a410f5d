"""pytest fixtures that start the real stack once per session and stop it at the end.

A part that cannot start raises with its log tail, so every test that needs it errors: nothing
skips itself because a service is missing. When a test fails, the log tails of every running
part are attached to its report.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from devstack.cluster import start_cluster, stop_cluster
from devstack.kafka import KafkaBroker, start_kafka
from devstack.kube import KubeControlPlane
from devstack.minio import ObjectStore, start_minio
from devstack.network import PodNetwork, create_bridge, remove_bridge
from devstack.process import Service, record_pid, tail
from devstack.spark import local_spark_conf

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_running: list[Service] = []


def track(service: Service) -> None:
    """Attach ``service``'s log tail to every failing test from now on (e.g. the operator)."""
    _running.append(service)


@pytest.fixture(scope="session")
def stack_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A per-session directory for the stack's data and logs."""
    return tmp_path_factory.mktemp("stack")


@pytest.fixture(scope="session")
def pod_network() -> Iterator[PodNetwork]:
    """The node's bridge: set up before Kafka and the API server bind to its gateway."""
    yield create_bridge()
    remove_bridge()


@pytest.fixture(scope="session")
def kafka(stack_dir: Path, pod_network: PodNetwork) -> Iterator[KafkaBroker]:
    """A real single-node KRaft broker: PLAINTEXT on loopback and for pods, and mTLS, SASL_SSL
    and SASL_PLAINTEXT listeners on the pod network's gateway, with its OIDC token issuer."""
    broker = start_kafka(stack_dir / "kafka", pod_address=pod_network.gateway)
    services = [broker.service, broker.issuer.service]
    _running.extend(services)
    yield broker
    broker.stop()
    for service in services:
        _running.remove(service)


@pytest.fixture(scope="session")
def object_store(stack_dir: Path, pod_network: PodNetwork) -> Iterator[ObjectStore]:
    """A real S3-compatible server (MinIO) with the bucket ``lake``, on the pod network's gateway
    (pods and host processes reach it there, as Kafka's pod listener)."""
    store = start_minio(stack_dir / "minio", address=pod_network.gateway)
    _running.append(store.service)
    store.create_bucket("lake")
    yield store
    store.stop()
    _running.remove(store.service)


@pytest.fixture(scope="session")
def kube(stack_dir: Path, pod_network: PodNetwork) -> Iterator[KubeControlPlane]:
    """A real cluster: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and a node
    (containerd + kubelet + kube-proxy) that runs the project's image, built from its Dockerfile."""
    plane = start_cluster(stack_dir / "kube", pod_network)
    services = [*plane.services, *(plane.node.services if plane.node else [])]
    _running.extend(services)
    yield plane
    stop_cluster(plane)
    for service in services:
        _running.remove(service)


@pytest.fixture(scope="session")
def spark_conf(stack_dir: Path) -> dict[str, str]:
    """Spark conf with the cached Delta and Kafka jars, for a local session."""
    return local_spark_conf(stack_dir / "spark")


@pytest.fixture(scope="session")
def spark(spark_conf: dict[str, str]) -> Iterator[SparkSession]:
    """A real local SparkSession with Delta and the Kafka source."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("deltaflow-tests")
    for key, value in spark_conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    jvm: Any = session.sparkContext._jvm
    record_pid(int(jvm.java.lang.ProcessHandle.current().pid()))
    yield session
    session.stop()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Stop the JVM behind pyspark's gateway, if any test started one.

    That JVM otherwise exits only when it notices Python is gone, which can be after the test
    command checks for leftover processes; stopping it here makes the end of the run deterministic.
    """
    import sys

    if "pyspark" not in sys.modules:
        return
    from pyspark import SparkContext

    gateway: Any = SparkContext._gateway
    if gateway is None:
        return
    if SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.stop()
    proc = getattr(gateway, "proc", None)
    gateway.shutdown()
    if proc is not None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except Exception:
            proc.kill()
    SparkContext._gateway = None
    SparkContext._jvm = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    """Attach the log tail of every running part to a failing test's report."""
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for service in _running:
            report.sections.append((f"log tail: {service.name}", tail(service.log_path, 40)))
