"""The README's main-job command: Kafka -> Spark Structured Streaming -> Delta, on the local stack.

Brings up a real KRaft broker, produces sample order records, streams them into a Delta table with
Spark + delta-spark, and prints the row count and a few rows read back with an independent reader.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from pathlib import Path

from devstack.install import REPO_ROOT
from devstack.kafka import start_kafka
from devstack.spark import local_spark_conf

COUNTRIES = ["DE", "FR", "US", "BR", "JP", "IN"]


def _say(t0: float, message: str) -> None:
    print(f"[demo {time.monotonic() - t0:5.1f}s] {message}", flush=True)


def main(argv: list[str] | None = None) -> int:
    """Run the demo end to end; returns a process exit code."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "demo-output")
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    shutil.rmtree(args.out, ignore_errors=True)

    _say(t0, "starting Kafka (KRaft, loopback)")
    broker = start_kafka(args.out / "kafka")
    try:
        from confluent_kafka import Producer
        from confluent_kafka.admin import AdminClient
        from confluent_kafka.cimpl import NewTopic

        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics([NewTopic("orders", num_partitions=3, replication_factor=1)])[
            "orders"
        ].result(timeout=30)
        _say(t0, f"producing {args.records} orders to topic 'orders' at {broker.bootstrap_servers}")
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
        producer.flush(60)
        del producer, admin  # close the clients before the broker goes away
        _stream(t0, broker.bootstrap_servers, args.out)
    finally:
        broker.stop()
    _say(t0, "done")
    return 0


def _stream(t0: float, bootstrap: str, out: Path) -> None:
    from deltalake import DeltaTable
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F  # noqa: N812

    _say(t0, "starting Spark (local mode) with delta-spark and the Kafka connector")
    builder = SparkSession.builder.appName("deltaflow-demo")
    for key, value in local_spark_conf(out / "spark").items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    table, checkpoint = out / "tables" / "orders", out / "checkpoints" / "orders"
    try:
        _say(t0, f"streaming 'orders' into the Delta table {table}")
        query = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", "orders")
            .option("startingOffsets", "earliest")
            .load()
            .select(
                F.from_json(
                    F.col("value").cast("string"),
                    "id BIGINT, amount DOUBLE, ts TIMESTAMP, country STRING",
                ).alias("r")
            )
            .select("r.*")
            .writeStream.format("delta")
            .option("checkpointLocation", str(checkpoint))
            .partitionBy("country")
            .trigger(availableNow=True)
            .start(str(table))
        )
        query.awaitTermination()
    finally:
        spark.stop()

    rows = DeltaTable(str(table)).to_pyarrow_table().sort_by("id")
    _say(t0, f"the table holds {rows.num_rows} rows (read back with the deltalake reader):")
    for row in rows.slice(0, 5).to_pylist():
        print("   ", row)


if __name__ == "__main__":
    sys.exit(main())
