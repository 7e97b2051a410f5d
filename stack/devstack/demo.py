"""The README's main job: the whole loop on a local cluster whose pods really run.

Starts a real KRaft broker and a real Kubernetes cluster (control plane + a containerd/kubelet
node running the project's image, built from its Dockerfile), installs the operator with the Helm
chart, applies a DeltaIngestion whose tables live on an S3-compatible object store (a local MinIO,
s3a://lake/...), produces sample orders with a few broken records, and shows as it goes: the driver
pod and the executor pods Spark creates running, `kubectl get deltaingestions`, the rows in the
Delta table and the dead letters (read back from the bucket with the independent deltalake reader),
and the resource's Events. Everything is stopped and removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from devstack.cluster import install_operator, lake_credentials, start_cluster, stop_cluster
from devstack.install import REPO_ROOT
from devstack.kafka import KafkaBroker, start_kafka
from devstack.kube import KubeControlPlane
from devstack.leftovers import empty_work_folder
from devstack.minio import ObjectStore, start_minio
from devstack.network import create_bridge, remove_bridge

COUNTRIES = ["DE", "FR", "US", "BR", "JP", "IN"]
BROKEN: list[tuple[bytes | None, bytes | None]] = [
    (b"bad-1", b'{"id": 1, "amount": '),  # truncated JSON
    (b"bad-2", b'{"id": "one", "amount": 2.0}'),  # wrong type
    (b"bad-3", None),  # tombstone
    (b"bad-4", b'{"id": 4, "country": "\xff\xfe"}'),  # not UTF-8
]
NAMESPACE = "data"
LAKE_MOUNT = "/lake"
BUCKET = "lake"


class Clock:
    """Progress lines with the time since the start."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def now(self) -> float:
        """Seconds since the start."""
        return time.monotonic() - self.t0

    def say(self, message: str) -> None:
        """Print one progress line."""
        print(f"[demo {self.now():6.1f}s] {message}", flush=True)


def create_topic(broker: KafkaBroker, topic: str, partitions: int) -> None:
    """Create ``topic`` with ``partitions`` partitions."""
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[
        topic
    ].result(timeout=30)


def produce_orders(
    broker: KafkaBroker, topic: str, count: int, first_id: int = 0, broken: bool = True
) -> int:
    """Produce ``count`` valid JSON orders (ids from ``first_id``) and, if asked, the broken
    records of :data:`BROKEN`; returns the number of records produced."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 20})
    rng = random.Random(first_id)
    for i in range(first_id, first_id + count):
        order = {
            "id": i,
            "amount": round(rng.uniform(1, 500), 2),
            "ts": "2026-11-22T12:00:00Z",
            "country": rng.choice(COUNTRIES),
        }
        encoded = json.dumps(order).encode()
        while True:
            try:
                producer.produce(topic, key=str(i).encode(), value=encoded)
                break
            except BufferError:  # the client's queue is full (a slow broker): let it send
                producer.poll(0.5)
        if i % 5000 == 0:
            producer.poll(0)
    if broken:
        for key, value in BROKEN:
            producer.produce(topic, key=key, value=value)
    if producer.flush(60) != 0:
        raise RuntimeError("records still unsent after 60 s")
    return count + (len(BROKEN) if broken else 0)


def cluster_manifest(
    name: str,
    bootstrap: str,
    *,
    topic: str = "orders",
    trigger: str = "5s",
    executors: int = 1,
    namespace: str = NAMESPACE,
    storage: dict[str, object] | None = None,
    lake: str | None = None,
) -> dict[str, Any]:
    """examples/orders.yaml for the local cluster: the broker's pod listener, CPU requests that
    fit a 2-core node (Spark still runs 1 core each), and the tables (``<lake>/<name>`` and
    ``<lake>/<name>_dead_letter``, the checkpoint next to them by default).

    With ``storage`` (``spec.sink.storage``, e.g. :meth:`ObjectStore.storage_spec`) the tables
    live on the object store under ``lake`` (an s3a:// prefix, default ``s3a://lake``); without
    it, on the ``lake`` claim mounted at ``/lake`` in every pod (see
    :func:`devstack.cluster.lake_volume`).
    """
    document: dict[str, Any] = yaml.safe_load((REPO_ROOT / "examples" / "orders.yaml").read_text())
    document["metadata"].update(name=name, namespace=namespace)
    spec = document["spec"]
    spec["source"]["bootstrapServers"] = bootstrap
    spec["source"]["topic"] = topic
    spec["source"]["maxOffsetsPerTrigger"] = 20000
    if storage is None:
        if lake is not None:
            raise ValueError("lake needs storage: without it the tables are on the lake claim")
        lake = f"file://{LAKE_MOUNT}"
        spec["volumes"] = [{"name": "lake", "claimName": "lake", "mountPath": LAKE_MOUNT}]
    lake = (lake or f"s3a://{BUCKET}").rstrip("/")
    spec["sink"] = {"tablePath": f"{lake}/{name}", "partitionBy": spec["sink"]["partitionBy"]}
    if storage is not None:
        spec["sink"]["storage"] = storage
    spec["deadLetter"] = {"tablePath": f"{lake}/{name}_dead_letter"}
    spec["trigger"] = {"interval": trigger}
    spec["scaling"] = {"minExecutors": executors, "maxExecutors": max(executors, 2)}
    spec["driver"] = {"cores": 1, "coreRequest": "300m", "memory": "1g"}
    spec["executor"] = {"cores": 1, "coreRequest": "300m", "memory": "768m"}
    return document


def table_rows(uri: str, storage_options: dict[str, str] | None = None) -> int:
    """Rows in the Delta table at ``uri`` (0 before its first commit), read with deltalake."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(uri, storage_options=storage_options)
        return int(table.to_pyarrow_dataset().count_rows())
    except TableNotFoundError:
        return 0


def pods(plane: KubeControlPlane, namespace: str, selector: str) -> list[dict[str, Any]]:
    """Pods matching a label selector."""
    return list(plane.kubectl_json("-n", namespace, "get", "pods", "-l", selector)["items"])


def running(pod: dict[str, Any]) -> bool:
    """The pod runs and every container is ready."""
    status = pod.get("status", {})
    return status.get("phase") == "Running" and all(
        c.get("ready") for c in status.get("containerStatuses", [])
    )


def wait(clock: Clock, what: str, probe: Any, timeout: float = 300, interval: float = 1.0) -> Any:
    """Poll ``probe`` until it returns something truthy; raise naming ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            clock.say(f"{what}: yes")
            return value
        time.sleep(interval)
    raise TimeoutError(f"{what}: not within {timeout:.0f}s")


def main(argv: list[str] | None = None) -> int:
    """Run the whole loop; returns a process exit code."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "demo-output")
    args = parser.parse_args(argv)
    clock = Clock()
    out = args.out.resolve()
    empty_work_folder(out)

    clock.say("creating the pod network (bridge dflow0, never routed off this machine)")
    net = create_bridge()
    broker: KafkaBroker | None = None
    store: ObjectStore | None = None
    plane: KubeControlPlane | None = None
    try:
        clock.say("starting Kafka (KRaft), listening on loopback and for pods")
        broker = start_kafka(out / "kafka", pod_address=net.gateway)
        clock.say(f"starting MinIO (S3-compatible) for pods and this host, bucket {BUCKET!r}")
        store = start_minio(out / "minio", address=net.gateway)
        store.create_bucket(BUCKET)
        clock.say(f"object store at {store.endpoint} (path-style, keys made up for this run)")
        clock.say("starting the cluster (first run: the image was just built from the Dockerfile)")
        plane = start_cluster(out / "cluster", net)
        _run_loop(clock, broker=broker, store=store, plane=plane, out=out, records=args.records)
    finally:
        clock.say(
            "stopping the cluster, Kafka and MinIO, removing the node's mounts, links and rules"
        )
        if plane is not None:
            stop_cluster(plane)
        if broker is not None:
            broker.stop()
        if store is not None:
            store.stop()
        remove_bridge()
    clock.say("done")
    return 0


def _run_loop(
    clock: Clock,
    *,
    broker: KafkaBroker,
    store: ObjectStore,
    plane: KubeControlPlane,
    out: Path,
    records: int,
) -> None:
    clock.say(f"helm install deltaflow charts/deltaflow (image {plane.image}), --wait")
    install_operator(plane)
    operator_pods = _pod_line(plane, "deltaflow-system", "app.kubernetes.io/name=deltaflow")
    clock.say(f"operator pods: {operator_pods}")
    plane.kubectl("create", "namespace", NAMESPACE)
    plane.kubectl("label", "namespace", NAMESPACE, "pod-security.kubernetes.io/enforce=restricted")
    # The keys go in as a Secret (from stdin, never on a command line or in demo-output); the
    # DeltaIngestion only names it.
    lake_credentials(plane, NAMESPACE, store)
    clock.say(f"Secret {NAMESPACE}/lake-creds holds the object store's keys")
    create_topic(broker, "orders", 3)
    assert broker.pod_bootstrap_servers is not None
    manifest = cluster_manifest(
        "orders", broker.pod_bootstrap_servers, storage=store.storage_spec()
    )
    table = manifest["spec"]["sink"]["tablePath"]
    dead = manifest["spec"]["deadLetter"]["tablePath"]
    options = store.storage_options()
    (out / "orders.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    clock.say(f"kubectl apply -f {out / 'orders.yaml'}")
    applied = clock.now()
    plane.kubectl("apply", "-f", str(out / "orders.yaml"))
    produced = produce_orders(broker, "orders", records)
    clock.say(f"produced {records} orders and {len(BROKEN)} broken records")
    clock.say(f"the table: {table} (dead letters: {dead}) on {store.endpoint}")
    driver = "app.kubernetes.io/instance=orders,app.kubernetes.io/component=driver"
    wait(clock, "driver pod Running", lambda: any(map(running, pods(plane, NAMESPACE, driver))))
    t_driver = clock.now() - applied
    wait(
        clock,
        "executor pods (created by Spark) Running",
        lambda: any(map(running, pods(plane, NAMESPACE, "spark-role=executor"))),
    )
    t_exec = clock.now() - applied
    wait(clock, "first batch committed to the table", lambda: table_rows(table, options) > 0)
    t_batch = clock.now() - applied
    wait(
        clock,
        f"all {records} orders in the table and the {len(BROKEN)} broken ones dead-lettered",
        lambda: table_rows(table, options) == records and table_rows(dead, options) == len(BROKEN),
    )
    ready = "jsonpath={.status.conditions[?(@.type=='Ready')].status}"
    wait(
        clock,
        "READY=True",
        lambda: plane.kubectl("-n", NAMESPACE, "get", "di", "orders", "-o", ready).stdout == "True",
    )
    print(plane.kubectl("-n", NAMESPACE, "get", "pods", "-o", "wide").stdout, flush=True)
    print(plane.kubectl("-n", NAMESPACE, "get", "deltaingestions").stdout, flush=True)
    _show(clock, table, dead, options, produced)
    events = plane.kubectl(
        "-n", NAMESPACE, "get", "events", "--field-selector", "involvedObject.kind=DeltaIngestion"
    )
    print(events.stdout, flush=True)
    clock.say(
        f"from kubectl apply: driver Running {t_driver:.0f}s, executors Running {t_exec:.0f}s, "
        f"first batch committed {t_batch:.0f}s"
    )


def _pod_line(plane: KubeControlPlane, namespace: str, selector: str) -> str:
    return ", ".join(
        f"{p['metadata']['name']} {p['status'].get('phase')}"
        for p in pods(plane, namespace, selector)
    )


def _show(
    clock: Clock, table_uri: str, dead_uri: str, options: dict[str, str], produced: int
) -> None:
    from deltalake import DeltaTable

    table = DeltaTable(table_uri, storage_options=options).to_pyarrow_table().sort_by("id")
    clock.say(
        f"the table {table_uri} holds {table.num_rows} rows "
        "(read back from the bucket with the deltalake reader):"
    )
    for row in table.slice(0, 3).to_pylist():
        print("   ", row)
    dead = DeltaTable(dead_uri, storage_options=options).to_pyarrow_table()
    clock.say(f"the dead-letter table holds {dead.num_rows} records, each with its reason:")
    for row in dead.select(["_kafka_partition", "_kafka_offset", "reason", "detail"]).to_pylist():
        print("   ", row)
    clock.say(
        f"{table.num_rows} + {dead.num_rows} = {table.num_rows + dead.num_rows} "
        f"of {produced} produced"
    )


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Exit without the interpreter's teardown: native threads of librdkafka and delta-rs torn
    # down at exit aborted the process ("terminate called without an active exception", exit
    # 134) in 2 of 3 runs after the demo had finished. Everything the demo started is stopped
    # by main() itself.
    os._exit(code)
