"""The README's main-job command: Kafka -> Deltaflow runtime -> Delta, on the local stack.

Brings up a real KRaft broker, produces sample orders (and a few broken records), writes a
DeltaIngestion manifest pointing at that broker, runs it with ``deltaflow run -f`` (the same
runtime the driver pod runs, in Spark local mode), and prints what landed in the table and in the
dead-letter table, read back with an independent reader (deltalake).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

from devstack.install import REPO_ROOT
from devstack.kafka import start_kafka
from devstack.process import record_pid

COUNTRIES = ["DE", "FR", "US", "BR", "JP", "IN"]
BROKEN: list[tuple[bytes | None, bytes | None]] = [
    (b"bad-1", b'{"id": 1, "amount": '),  # truncated JSON
    (b"bad-2", b'{"id": "one", "amount": 2.0}'),  # wrong type
    (b"bad-3", None),  # tombstone
    (b"bad-4", b'{"id": 4, "country": "\xff\xfe"}'),  # not UTF-8
]


def _say(t0: float, message: str) -> None:
    print(f"[demo {time.monotonic() - t0:5.1f}s] {message}", flush=True)


def _manifest(bootstrap: str, out: Path) -> Path:
    """examples/orders.yaml, pointed at the local broker and a local table."""
    document = yaml.safe_load((REPO_ROOT / "examples" / "orders.yaml").read_text())
    spec = document["spec"]
    spec["source"]["bootstrapServers"] = bootstrap
    spec["sink"] = {
        "tablePath": f"file://{out / 'lake' / 'orders'}",
        "partitionBy": spec["sink"]["partitionBy"],
    }
    spec["deadLetter"] = {"tablePath": f"file://{out / 'lake' / 'orders_dead_letter'}"}
    path = out / "orders.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def main(argv: list[str] | None = None) -> int:
    """Run the demo end to end; returns a process exit code."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "demo-output")
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    out = args.out.resolve()
    shutil.rmtree(out, ignore_errors=True)

    _say(t0, "starting Kafka (KRaft, loopback)")
    broker = start_kafka(out / "kafka")
    try:
        from confluent_kafka import Producer
        from confluent_kafka.admin import AdminClient
        from confluent_kafka.cimpl import NewTopic

        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics([NewTopic("orders", num_partitions=3, replication_factor=1)])[
            "orders"
        ].result(timeout=30)
        _say(
            t0,
            f"producing {args.records} orders and {len(BROKEN)} broken records to 'orders' "
            f"at {broker.bootstrap_servers}",
        )
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
        rng = random.Random(7)
        for i in range(args.records):
            order = {
                "id": i,
                "amount": round(rng.uniform(1, 500), 2),
                "ts": "2026-11-22T12:00:00Z",
                "country": rng.choice(COUNTRIES),
            }
            producer.produce("orders", key=str(i).encode(), value=json.dumps(order).encode())
            if i % 5000 == 0:
                producer.poll(0)
        for key, value in BROKEN:
            producer.produce("orders", key=key, value=value)
        producer.flush(60)
        del producer, admin  # close the clients before the broker goes away

        manifest = _manifest(broker.bootstrap_servers, out)
        command = [
            str(Path(sys.executable).parent / "deltaflow"),
            "run",
            "-f",
            str(manifest),
            "--available-now",
            "--local-dir",
            str(out / "local"),
            "--metrics-port",
            "0",
        ]
        _say(t0, f"running the manifest {manifest} with the Deltaflow runtime:")
        print("    $ deltaflow " + " ".join(command[1:]), flush=True)
        proc = subprocess.Popen(command, cwd=out)
        record_pid(proc.pid)
        if proc.wait() != 0:
            _say(t0, f"deltaflow run failed (exit {proc.returncode})")
            return 1
    finally:
        broker.stop()
    _show(t0, out)
    _say(t0, "done")
    return 0


def _show(t0: float, out: Path) -> None:
    from deltalake import DeltaTable

    table = DeltaTable(str(out / "lake" / "orders")).to_pyarrow_table().sort_by("id")
    _say(t0, f"the table holds {table.num_rows} rows (read back with the deltalake reader):")
    for row in table.slice(0, 3).to_pylist():
        print("   ", row)
    dead = DeltaTable(str(out / "lake" / "orders_dead_letter")).to_pyarrow_table()
    _say(t0, f"the dead-letter table holds {dead.num_rows} records, each with its reason:")
    for row in dead.select(["_kafka_partition", "_kafka_offset", "reason", "detail"]).to_pylist():
        print("   ", row)


if __name__ == "__main__":
    sys.exit(main())
