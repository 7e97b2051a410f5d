"""Kafka's own semantics, against the real broker: what a transactional producer aborted never
lands, in the table or in the dead-letter table; a topic deleted and created again is not
resumed into."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from runtime_kit import (
    create_topic,
    duplicates,
    manifest,
    order,
    pipeline,
    produce,
    produce_transactions,
    read_table,
    tpos,
    unique,
    wait_for,
)

from deltaflow_runtime.guard import CheckpointMismatchError
from deltaflow_runtime.stream import StreamOptions, StreamRunner
from devstack.kafka import KafkaBroker

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def test_records_of_aborted_transactions_never_land(
    kafka: KafkaBroker, runtime_spark: SparkSession, tmp_path: Path
) -> None:
    bootstrap = kafka.bootstrap_servers
    topic = unique("txn")
    create_topic(bootstrap, topic, partitions=2)
    plain = produce(bootstrap, topic, [(b"k", order(i)) for i in range(100)])

    def good(first: int, n: int) -> list[tuple[bytes | None, bytes | None]]:
        return [(b"k", order(i)) for i in range(first, first + n)]

    bad: list[tuple[bytes | None, bytes | None]] = [(b"k", b"not json"), (b"k", b'{"id": "x"}')]
    committed, aborted = produce_transactions(
        bootstrap,
        topic,
        [
            (good(1000, 100), True),
            (good(2000, 100) + bad, False),  # an exactly-once producer's failed attempt
            (good(3000, 50) + bad, True),
            (good(4000, 30), False),  # the topic's last transaction: aborted
        ],
    )
    assert aborted
    assert committed
    plain += produce(bootstrap, topic, [(b"k", order(i)) for i in range(5000, 5010)])

    runner = StreamRunner(
        runtime_spark,
        pipeline(
            manifest(
                unique("txn"), topic, bootstrap, tmp_path, source={"maxOffsetsPerTrigger": 120}
            )
        ),
        StreamOptions(available_now=True),
    )
    runner.start()
    runner.wait(timeout=600)
    ident = runner.pipeline.identity
    table, dead = read_table(ident.table_path), read_table(ident.dead_letter_table_path)

    landed = tpos(table) + tpos(dead)
    assert duplicates(landed) == []
    assert not {s.tpo for s in aborted} & set(landed), "an aborted record landed"
    bad_values = {v for _, v in bad}
    kept = plain + committed
    assert sorted(tpos(table)) == sorted(s.tpo for s in kept if s.value not in bad_values)
    assert sorted(tpos(dead)) == sorted(s.tpo for s in kept if s.value in bad_values)
    assert sorted(r["id"] for r in table) == sorted(
        [*range(100), *range(1000, 1100), *range(3000, 3050), *range(5000, 5010)]
    )


def test_a_topic_deleted_and_created_again_is_refused_at_start(
    kafka: KafkaBroker, runtime_spark: SparkSession, tmp_path: Path
) -> None:
    """The checkpoint's offsets belong to the topic's old log: resuming in the new one would
    skip its first records (or read others than planned), and failOnDataLoss sees neither."""
    from confluent_kafka.admin import AdminClient

    bootstrap = kafka.bootstrap_servers
    topic = unique("recreated")
    create_topic(bootstrap, topic, partitions=1)
    produce(bootstrap, topic, [(b"k", order(i)) for i in range(50)])
    doc = manifest(unique("recreated"), topic, bootstrap, tmp_path)

    def drain() -> StreamRunner:
        runner = StreamRunner(runtime_spark, pipeline(doc), StreamOptions(available_now=True))
        runner.start()
        runner.wait(timeout=600)
        return runner

    ident = drain().pipeline.identity
    assert len(read_table(ident.table_path)) == 50

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(timeout=30)
    wait_for(lambda: topic not in admin.list_topics(timeout=10).topics, 60, "topic deleted")
    deadline = time.monotonic() + 60
    while True:  # the broker finishes the deletion in the background
        try:
            create_topic(bootstrap, topic, partitions=1)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    produce(bootstrap, topic, [(b"k", order(i)) for i in range(100, 160)])

    with pytest.raises(CheckpointMismatchError, match="deleted and created again") as refused:
        drain()
    assert refused.value.reason.value == "TopicRecreated"
    assert "create a new DeltaIngestion" in str(refused.value)
    assert len(read_table(ident.table_path)) == 50  # nothing read from the new log


def test_a_stream_pointed_at_another_kafka_cluster_is_refused_at_start(
    kafka: KafkaBroker, runtime_spark: SparkSession, tmp_path: Path
) -> None:
    """bootstrapServers moved to another cluster holding a topic of the same name: its offsets
    mean other records (failOnDataLoss sees nothing wrong when they are larger), so the start
    is refused with what to do, naming both clusters, before anything is read."""
    from devstack.kafka import start_kafka

    topic = unique("moved")
    create_topic(kafka.bootstrap_servers, topic, partitions=1)
    produce(kafka.bootstrap_servers, topic, [(b"k", order(i)) for i in range(40)])
    doc = manifest(unique("moved"), topic, kafka.bootstrap_servers, tmp_path)

    def drain(bootstrap: str) -> StreamRunner:
        doc["spec"]["source"]["bootstrapServers"] = bootstrap
        runner = StreamRunner(runtime_spark, pipeline(doc), StreamOptions(available_now=True))
        runner.start()
        runner.wait(timeout=600)
        return runner

    ident = drain(kafka.bootstrap_servers).pipeline.identity
    assert len(read_table(ident.table_path)) == 40

    other = start_kafka(tmp_path / "other-cluster")
    try:
        create_topic(other.bootstrap_servers, topic, partitions=1)
        produce(other.bootstrap_servers, topic, [(b"k", order(i)) for i in range(500, 600)])
        moved = pytest.raises(CheckpointMismatchError, match="mean nothing in another cluster")
        with moved as refused:
            drain(other.bootstrap_servers)
    finally:
        other.stop()
    assert refused.value.reason.value == "KafkaClusterChanged"
    assert len(read_table(ident.table_path)) == 40  # nothing read from the other cluster
