"""The Kafka source: Spark reader options and the matching librdkafka settings, from the spec.

Credentials never appear in the spec: the operator puts Secret values into the driver's environment
(``DELTAFLOW_KAFKA_USERNAME`` / ``DELTAFLOW_KAFKA_PASSWORD``) and mounts the CA bundle as a file.
Both clients (Spark's Java consumer and the Python admin client) get the same security settings.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from deltaflow_api.driver_pod import ENV_KAFKA_PASSWORD, ENV_KAFKA_USERNAME, KAFKA_CA_FILE
from deltaflow_api.v1alpha1 import KafkaSource
from deltaflow_runtime.checkpoint import TopicOffsets
from deltaflow_runtime.errors import InvalidSpecError
from deltaflow_runtime.kafka_admin import client_config

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

ENV_CA_FILE = "DELTAFLOW_KAFKA_CA_FILE"
# Where the operator mounts spec.source.auth.caCertificate.
DEFAULT_CA_FILE = KAFKA_CA_FILE

_JAAS_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


class SourceConfigError(InvalidSpecError):
    """The source cannot be configured (e.g. SASL without credentials in the environment)."""


@dataclass(frozen=True)
class KafkaSecrets:
    """Credential material resolved from the environment (never from the spec)."""

    username: str | None = None
    password: str | None = None
    ca_file: str | None = None

    @classmethod
    def from_env(cls, source: KafkaSource, env: Mapping[str, str] | None = None) -> KafkaSecrets:
        """Read what ``source.auth`` references; fail naming the variable that is missing."""
        e = os.environ if env is None else env
        auth = source.auth
        if auth is None:
            return cls()
        username = password = ca_file = None
        if auth.security_protocol.startswith("SASL"):
            username, password = e.get(ENV_KAFKA_USERNAME), e.get(ENV_KAFKA_PASSWORD)
            missing = [
                n
                for n, v in ((ENV_KAFKA_USERNAME, username), (ENV_KAFKA_PASSWORD, password))
                if not v
            ]
            if missing:
                raise SourceConfigError(
                    f"spec.source.auth uses {auth.security_protocol} but {', '.join(missing)} "
                    "is not set (the operator fills it from spec.source.auth username/password)"
                )
        if auth.ca_certificate is not None:
            ca_file = e.get(ENV_CA_FILE, DEFAULT_CA_FILE)
        return cls(username, password, ca_file)


def _jaas(mechanism: str, username: str, password: str) -> str:
    def quote(value: str) -> str:
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'

    credentials = f"username={quote(username)} password={quote(password)}"
    return f"{_JAAS_MODULES[mechanism]} required {credentials};"


def kafka_client_properties(source: KafkaSource, secrets: KafkaSecrets) -> dict[str, str]:
    """Java Kafka client properties (without Spark's ``kafka.`` prefix) for security."""
    auth = source.auth
    if auth is None:
        return {}
    props: dict[str, str] = {"security.protocol": auth.security_protocol}
    if auth.security_protocol.startswith("SASL") and auth.sasl_mechanism is not None:
        props["sasl.mechanism"] = auth.sasl_mechanism
        props["sasl.jaas.config"] = _jaas(
            auth.sasl_mechanism, secrets.username or "", secrets.password or ""
        )
    if secrets.ca_file is not None:
        props["ssl.truststore.type"] = "PEM"
        props["ssl.truststore.location"] = secrets.ca_file
    return props


def spark_kafka_options(
    source: KafkaSource, secrets: KafkaSecrets, *, min_partitions: int | None = None
) -> dict[str, str]:
    """Options for ``spark.readStream.format("kafka")`` from the spec; ``min_partitions`` is the
    stream's tasks per batch (``DeltaIngestionSpec.tasks_per_batch``), None for Spark's default."""
    options = {
        "kafka.bootstrap.servers": source.bootstrap_servers,
        "startingOffsets": source.starting_offsets,
        "failOnDataLoss": "true" if source.fail_on_data_loss else "false",
        "includeHeaders": "false",
        # Kafka's consumers read uncommitted records unless told, Spark's too: records of a
        # transaction its producer aborted (Kafka Streams, Flink and other exactly-once
        # producers abort and retry) would land. Committed only; the offsets of aborted records
        # and transaction markers are gaps Spark skips.
        "kafka.isolation.level": "read_committed",
    }
    if source.topic is not None:
        options["subscribe"] = source.topic
    else:
        options["subscribePattern"] = str(source.topic_pattern)
    if source.max_offsets_per_trigger is not None:
        options["maxOffsetsPerTrigger"] = str(source.max_offsets_per_trigger)
    if min_partitions is not None:
        options["minPartitions"] = str(min_partitions)
    for key, value in kafka_client_properties(source, secrets).items():
        options[f"kafka.{key}"] = value
    return options


def librdkafka_config(source: KafkaSource, secrets: KafkaSecrets) -> dict[str, str]:
    """The same connection for confluent-kafka's admin client (librdkafka property names)."""
    ca = {"ssl.ca.location": secrets.ca_file} if secrets.ca_file is not None else {}
    return client_config(source, secrets.username, secrets.password, ca)


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
