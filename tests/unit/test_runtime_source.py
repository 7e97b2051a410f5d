"""Kafka options for Spark's source, from the spec (security: tests/unit/test_kafka_auth.py)."""

from __future__ import annotations

import pytest

from deltaflow_api.v1alpha1 import DeltaIngestionSpec, KafkaSource
from deltaflow_runtime.kafka_auth import KafkaMaterial, librdkafka_config
from deltaflow_runtime.source import spark_kafka_options

NO_SECRETS = KafkaMaterial({})


def test_plain_topic_options() -> None:
    source = KafkaSource(bootstrap_servers="k:9092", topic="orders", max_offsets_per_trigger=500)
    options = spark_kafka_options(source, NO_SECRETS)
    assert options == {
        "kafka.bootstrap.servers": "k:9092",
        "subscribe": "orders",
        "startingOffsets": "earliest",
        "failOnDataLoss": "true",
        "includeHeaders": "false",
        "kafka.isolation.level": "read_committed",
        "maxOffsetsPerTrigger": "500",
    }
    assert librdkafka_config(source, NO_SECRETS) == {"bootstrap.servers": "k:9092"}


def _spec(source: dict[str, object], **more: object) -> DeltaIngestionSpec:
    return DeltaIngestionSpec.model_validate(
        {
            "source": {"bootstrapServers": "k:9092", "topic": "orders", **source},
            "format": {"type": "raw"},
            "sink": {"tablePath": "/lake/orders"},
            **more,
        }
    )


def test_min_partitions_reaches_sparks_kafka_source() -> None:
    spec = _spec({"minPartitions": 48})
    tasks = spec.tasks_per_batch(scaled_executors=True)
    assert (
        spark_kafka_options(spec.source, NO_SECRETS, min_partitions=tasks)["minPartitions"] == "48"
    )
    # A local run keeps Spark's default unless the spec asks.
    assert spec.tasks_per_batch(scaled_executors=False) == 48
    plain = _spec({})
    local = plain.tasks_per_batch(scaled_executors=False)
    assert "minPartitions" not in spark_kafka_options(
        plain.source, NO_SECRETS, min_partitions=local
    )


@pytest.mark.parametrize(
    ("scaling", "cores", "tasks"),
    [
        ({}, 1, 8),  # maxExecutors 4 by default: two tasks per core
        ({"maxExecutors": 3}, 1, 6),
        ({"maxExecutors": 10}, 4, 80),
        ({"maxExecutors": 1000}, 64, 10_000),  # never past what minPartitions may be set to
    ],
)
def test_a_scaled_stream_reads_two_tasks_per_core_at_max_executors_by_default(
    scaling: dict[str, int], cores: int, tasks: int
) -> None:
    spec = _spec({}, scaling=scaling, executor={"cores": cores, "memory": "2g"})
    assert spec.tasks_per_batch(scaled_executors=True) == tasks
    options = spark_kafka_options(spec.source, NO_SECRETS, min_partitions=tasks)
    assert options["minPartitions"] == str(tasks)


def test_pattern_latest_and_data_loss_tolerated() -> None:
    source = KafkaSource(
        bootstrap_servers="k:9092",
        topic_pattern="orders-.*",
        starting_offsets="latest",
        fail_on_data_loss=False,
    )
    options = spark_kafka_options(source, NO_SECRETS)
    assert options["subscribePattern"] == "orders-.*"
    assert "subscribe" not in options
    assert options["startingOffsets"] == "latest"
    assert options["failOnDataLoss"] == "false"


def test_user_options_reach_spark_but_never_override_deltaflow_s_own() -> None:
    source = KafkaSource.model_validate(
        {
            "bootstrapServers": "k:9092",
            "topic": "orders",
            "isolationLevel": "read_uncommitted",
            "options": {"kafka.fetch.max.bytes": "1048576", "kafka.client.rack": "az1"},
        }
    )
    options = spark_kafka_options(source, NO_SECRETS)
    assert options["kafka.fetch.max.bytes"] == "1048576"
    assert options["kafka.client.rack"] == "az1"
    assert options["kafka.isolation.level"] == "read_uncommitted"
    # A resource stored before admission refused the key cannot override the spec's level.
    stored = source.model_copy(update={"options": {"kafka.isolation.level": "read_uncommitted"}})
    stored = stored.model_copy(update={"isolation_level": "read_committed"})
    assert spark_kafka_options(stored, NO_SECRETS)["kafka.isolation.level"] == "read_committed"
    # librdkafka takes the few settings it shares with Java's consumer, no others.
    assert librdkafka_config(source, NO_SECRETS) == {
        "bootstrap.servers": "k:9092",
        "client.rack": "az1",
    }
