"""A single-node Kafka broker in KRaft mode (broker + controller in one JVM) on loopback."""

from __future__ import annotations

import base64
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

from devstack.install import installed_path
from devstack.process import Service, ServiceError, free_port, tcp_open

_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = out
logger.kafka.name = org.apache.kafka
logger.kafka.level = WARN
logger.state.name = state.change.logger
logger.state.level = WARN
"""


@dataclass
class KafkaBroker:
    """A running broker: its bootstrap address and the supervised process."""

    bootstrap_servers: str
    service: Service
    # The listener pods use (on the pod network's gateway); None without a pod network.
    pod_bootstrap_servers: str | None = None

    def stop(self) -> None:
        """Stop the broker (its data directory goes with the run's temp dir)."""
        self.service.stop()

    def consumer_groups(self, *args: str) -> str:
        """Run Kafka's standard ``kafka-consumer-groups`` tool against this broker; its stdout."""
        tool = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
        done = subprocess.run(
            ["java", "-Xmx256m", "-cp", f"{installed_path('kafka')}/*", tool,
             "--bootstrap-server", self.bootstrap_servers, *args],
            capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip
        if done.returncode != 0:
            raise ServiceError(f"kafka-consumer-groups {' '.join(args)} failed:\n{done.stderr}")
        return done.stdout

    def restart(self, timeout: float = 90.0) -> None:
        """Stop the broker and start it again on the same ports and data (a broker restart)."""
        self.service.stop()
        self.service.start()
        self.service.wait_ready(lambda: _answers_metadata(self.bootstrap_servers), timeout)


def _server_properties(
    data_dir: Path, port: int, controller_port: int, pod_listener: str | None
) -> str:
    listeners = f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}"
    advertised = f"PLAINTEXT://127.0.0.1:{port}"
    protocols = "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
    if pod_listener is not None:
        # A second listener for pods: each client is told the address of the listener it used.
        listeners += f",PODS://{pod_listener}"
        advertised += f",PODS://{pod_listener}"
        protocols += ",PODS:PLAINTEXT"
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": listeners,
        "advertised.listeners": advertised,
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": protocols,
        "log.dirs": str(data_dir / "log"),
        "num.partitions": "1",
        # One node: every internal topic must fit on it.
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        # Tests that exercise retention delete segments quickly.
        "log.retention.check.interval.ms": "1000",
        "log.segment.delete.delay.ms": "0",
    }
    return "".join(f"{k}={v}\n" for k, v in props.items())


def _answers_metadata(bootstrap: str) -> bool:
    from confluent_kafka.admin import AdminClient

    host, port = bootstrap.rsplit(":", 1)
    if not tcp_open(host, int(port)):
        return False
    # log_level 0: a probe client must not fill the console with retries once we stop.
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    return len(admin.list_topics(timeout=2).brokers) == 1


def start_kafka(
    work_dir: Path, pod_address: str | None = None, timeout: float = 90.0
) -> KafkaBroker:
    """Format storage and start a KRaft broker; return once it answers metadata requests.

    With ``pod_address`` (the pod network's gateway) the broker also listens there for pods.
    """
    libs = installed_path("kafka")
    work_dir.mkdir(parents=True, exist_ok=True)
    port, controller_port = free_port(), free_port()
    pod_listener = f"{pod_address}:{free_port()}" if pod_address else None
    config = work_dir / "server.properties"
    config.write_text(_server_properties(work_dir, port, controller_port, pod_listener))
    (work_dir / "log4j2.properties").write_text(_LOG4J2)
    java = [
        "java",
        "-Xms256m",
        "-Xmx768m",
        f"-Dlog4j2.configurationFile={work_dir / 'log4j2.properties'}",
        "-cp",
        f"{libs}/*",
    ]
    cluster_id = _cluster_id()
    fmt = subprocess.run(
        [*java, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(config)],
        capture_output=True,
        text=True,
        check=False,
    )
    if fmt.returncode != 0:
        raise ServiceError(f"kafka storage format failed:\n{fmt.stdout}\n{fmt.stderr}")
    service = Service("kafka", [*java, "kafka.Kafka", str(config)], work_dir / "kafka.log")
    service.start()
    bootstrap = f"127.0.0.1:{port}"

    try:
        service.wait_ready(
            lambda: _answers_metadata(bootstrap), timeout, "answering metadata requests"
        )
    except ServiceError:
        service.stop()
        raise
    return KafkaBroker(bootstrap, service, pod_listener)


def _cluster_id() -> str:
    """A KRaft cluster id: a random UUID in URL-safe base64, never starting with '-' (the
    storage tool would read it as an option; Kafka's own random-uuid avoids it the same way)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id
