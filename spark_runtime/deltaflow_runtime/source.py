"""The Kafka source: Spark reader options from the spec (the connection's security is
:mod:`deltaflow_runtime.kafka_auth`'s, shared with the driver's own Kafka clients)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from deltaflow_api.v1alpha1 import KafkaSource
from deltaflow_runtime.checkpoint import TopicOffsets
from deltaflow_runtime.errors import InvalidSpecError
from deltaflow_runtime.jvm import jvm
from deltaflow_runtime.kafka_auth import KafkaMaterial, spark_source_options

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def spark_kafka_options(
    source: KafkaSource, material: KafkaMaterial, *, min_partitions: int | None = None
) -> dict[str, str]:
    """Options for ``spark.readStream.format("kafka")`` from the spec; ``min_partitions`` is the
    stream's tasks per batch (``DeltaIngestionSpec.tasks_per_batch``), None for Spark's default."""
    options = {
        "kafka.bootstrap.servers": source.bootstrap_servers,
        "startingOffsets": source.starting_offsets,
        "failOnDataLoss": "true" if source.fail_on_data_loss else "false",
        "includeHeaders": "false",
    }
    if source.topic is not None:
        options["subscribe"] = source.topic
    else:
        options["subscribePattern"] = str(source.topic_pattern)
    if source.max_offsets_per_trigger is not None:
        options["maxOffsetsPerTrigger"] = str(source.max_offsets_per_trigger)
    if min_partitions is not None:
        options["minPartitions"] = str(min_partitions)
    # The user's kafka.* settings, the isolation level and security. Kafka's consumers read
    # uncommitted records unless told (Spark's too): source.isolationLevel is read_committed
    # unless the spec says otherwise, so records of a transaction its producer aborted (Kafka
    # Streams, Flink and other exactly-once producers abort and retry) do not land; the
    # offsets of aborted records and transaction markers are gaps Spark skips.
    options.update(spark_source_options(source, material))
    return options


# What every consumer config needs before Kafka judges one more setting beside it.
_JUDGED_BESIDE = {
    "bootstrap.servers": "localhost:9092",
    "key.deserializer": "org.apache.kafka.common.serialization.ByteArrayDeserializer",
    "value.deserializer": "org.apache.kafka.common.serialization.ByteArrayDeserializer",
}


def kafka_option_problems(spark: SparkSession, source: KafkaSource) -> list[str]:
    """Each ``kafka.*`` value of source.options Kafka's own consumer refuses (a non-numeric
    ``kafka.fetch.max.bytes``, a size under its minimum, an unknown enum value, a class it
    cannot load), judged one key at a time in this JVM: by
    ``org.apache.kafka.clients.consumer.ConsumerConfig``, then by making (and closing, never
    connecting) a ``KafkaConsumer``, which loads the classes a setting names. Each problem
    names its key; Spark would fail every start with a ConfigException."""
    kafka = jvm(spark).org.apache.kafka.clients.consumer
    problems = []
    for key, value in sorted(source.options.items()):
        if not key.startswith("kafka."):
            continue
        settings = jvm(spark).java.util.HashMap()
        for name, default in _JUDGED_BESIDE.items():
            settings.put(name, default)
        settings.put(key.removeprefix("kafka."), value)
        try:
            kafka.ConsumerConfig(settings)
            kafka.KafkaConsumer(settings).close()
        except Exception as error:
            problems.append(
                f"spec.source.options.{key}: Kafka's consumer refuses {value!r}: "
                + _java_reason(error)
            )
    return problems


def _java_reason(error: Exception) -> str:
    """The innermost Java message of ``error`` (a KafkaConsumer wraps its cause in "Failed to
    construct kafka consumer")."""
    java = getattr(error, "java_exception", None)
    if java is None:
        return str(error).splitlines()[0][:500]
    while java.getCause() is not None and java.getCause() != java:
        java = java.getCause()
    return f"{java.getMessage()}"[:500]


def check_kafka_options(spark: SparkSession, source: KafkaSource) -> None:
    """Refuse source.options Kafka's consumer refuses (:func:`kafka_option_problems`): a fix of
    the spec, never a restart."""
    problems = kafka_option_problems(spark, source)
    if problems:
        raise InvalidSpecError(
            "; ".join(problems) + ". Fix or remove the option in spec.source.options"
        )


def read_stream(spark: SparkSession, options: Mapping[str, str]) -> DataFrame:
    """The streaming Kafka DataFrame (key, value, topic, partition, offset, timestamp, ...)."""
    return spark.readStream.format("kafka").options(**options).load()


def batch_read_options(
    stream_options: Mapping[str, str], start: TopicOffsets, end: TopicOffsets
) -> dict[str, str]:
    """Options for a batch ``spark.read.format("kafka")`` of exactly the records from ``start``
    (inclusive) to ``end`` (exclusive), with the stream's connection and security settings."""
    streaming_only = {
        "subscribe",
        "subscribePattern",
        "assign",
        "startingOffsets",
        "endingOffsets",
        "maxOffsetsPerTrigger",
        "minPartitions",
    }
    options = {k: v for k, v in stream_options.items() if k not in streaming_only}

    def render(offsets: TopicOffsets) -> str:
        return json.dumps(
            {t: {str(p): o for p, o in sorted(ps.items())} for t, ps in sorted(offsets.items())}
        )

    options["assign"] = json.dumps({t: sorted(ps) for t, ps in sorted(end.items())})
    options["startingOffsets"] = render({t: start[t] for t in end})
    options["endingOffsets"] = render(end)
    return options


def read_range(
    spark: SparkSession, stream_options: Mapping[str, str], start: TopicOffsets, end: TopicOffsets
) -> DataFrame:
    """The Kafka records of one offset range, as a batch DataFrame shaped like the stream's."""
    return (
        spark.read.format("kafka").options(**batch_read_options(stream_options, start, end)).load()
    )
