"""Kafka options for Spark and for the admin client, from the spec and the environment."""

from __future__ import annotations

import pytest

from deltaflow_api.v1alpha1 import DeltaIngestionSpec, KafkaSource
from deltaflow_runtime.source import (
    KafkaSecrets,
    SourceConfigError,
    librdkafka_config,
    spark_kafka_options,
)


def test_plain_topic_options() -> None:
    source = KafkaSource(bootstrap_servers="k:9092", topic="orders", max_offsets_per_trigger=500)
    options = spark_kafka_options(source, KafkaSecrets())
    assert options == {
        "kafka.bootstrap.servers": "k:9092",
        "subscribe": "orders",
        "startingOffsets": "earliest",
        "failOnDataLoss": "true",
        "includeHeaders": "false",
        "kafka.isolation.level": "read_committed",
        "maxOffsetsPerTrigger": "500",
    }
    assert librdkafka_config(source, KafkaSecrets()) == {"bootstrap.servers": "k:9092"}


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
        spark_kafka_options(spec.source, KafkaSecrets(), min_partitions=tasks)["minPartitions"]
        == "48"
    )
    # A local run keeps Spark's default unless the spec asks.
    assert spec.tasks_per_batch(scaled_executors=False) == 48
    plain = _spec({})
    local = plain.tasks_per_batch(scaled_executors=False)
    assert "minPartitions" not in spark_kafka_options(
        plain.source, KafkaSecrets(), min_partitions=local
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
    options = spark_kafka_options(spec.source, KafkaSecrets(), min_partitions=tasks)
    assert options["minPartitions"] == str(tasks)


def test_pattern_latest_and_data_loss_tolerated() -> None:
    source = KafkaSource(
        bootstrap_servers="k:9092",
        topic_pattern="orders-.*",
        starting_offsets="latest",
        fail_on_data_loss=False,
    )
    options = spark_kafka_options(source, KafkaSecrets())
    assert options["subscribePattern"] == "orders-.*"
    assert "subscribe" not in options
    assert options["startingOffsets"] == "latest"
    assert options["failOnDataLoss"] == "false"


def _sasl_source() -> KafkaSource:
    return KafkaSource.model_validate(
        {
            "bootstrapServers": "k:9093",
            "topic": "orders",
            "auth": {
                "securityProtocol": "SASL_SSL",
                "saslMechanism": "SCRAM-SHA-512",
                "username": {"name": "kafka", "key": "user"},
                "password": {"name": "kafka", "key": "pass"},
                "caCertificate": {"name": "kafka", "key": "ca.crt"},
            },
        }
    )


def test_sasl_ssl_from_the_environment() -> None:
    source = _sasl_source()
    env = {"DELTAFLOW_KAFKA_USERNAME": "ingest", "DELTAFLOW_KAFKA_PASSWORD": 'p"w'}
    secrets = KafkaSecrets.from_env(source, env)
    assert secrets.ca_file == "/etc/deltaflow/kafka-ca/ca.crt"
    options = spark_kafka_options(source, secrets)
    assert options["kafka.security.protocol"] == "SASL_SSL"
    assert options["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert options["kafka.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="ingest" password="p\\"w";'
    )
    assert options["kafka.ssl.truststore.type"] == "PEM"
    assert options["kafka.ssl.truststore.location"] == "/etc/deltaflow/kafka-ca/ca.crt"
    assert librdkafka_config(source, secrets) == {
        "bootstrap.servers": "k:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "ingest",
        "sasl.password": 'p"w',
        "ssl.ca.location": "/etc/deltaflow/kafka-ca/ca.crt",
    }


def test_missing_credentials_name_the_variable() -> None:
    with pytest.raises(SourceConfigError, match="DELTAFLOW_KAFKA_PASSWORD"):
        KafkaSecrets.from_env(_sasl_source(), {"DELTAFLOW_KAFKA_USERNAME": "ingest"})
