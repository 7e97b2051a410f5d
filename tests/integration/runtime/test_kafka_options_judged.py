"""spec.source.options are judged by Kafka's own consumer config at a stream's start, in the
stream's JVM (the client Spark's consumers are made with): a value Kafka refuses ends the
start with InvalidSpec naming the key and Kafka's reason (a driver exits 2 and is not
restarted; a pool member waits in NeedsAction), where Spark would fail every start with a
ConfigException. Real Spark: the JVM answers through py4j."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from runtime_kit import manifest, pipeline

from deltaflow_api.v1alpha1 import KafkaSource
from deltaflow_runtime.errors import ExitCode, InvalidSpecError
from deltaflow_runtime.source import kafka_option_problems
from deltaflow_runtime.stream import start_checks

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark]


def _source(options: dict[str, str]) -> KafkaSource:
    return KafkaSource(bootstrap_servers="k:9092", topic="orders", options=options)


# (option, a value Kafka's consumer refuses, the words of its reason)
REFUSED = [
    ("kafka.fetch.max.bytes", "lots", "Not a number of type INT"),
    ("kafka.max.poll.records", "0", "Value must be at least 1"),
    ("kafka.request.timeout.ms", "-5", "Value must be at least 0"),
    ("kafka.client.dns.lookup", "nowhere", "String must be one of"),
    ("kafka.partition.assignment.strategy", "com.example.Nope", "com.example.Nope"),
    ("kafka.check.crcs", "maybe", "Expected value to be either true or false"),
]


@pytest.mark.parametrize(("key", "value", "words"), REFUSED, ids=[r[0] for r in REFUSED])
def test_a_value_kafka_refuses_is_named_by_its_key(
    runtime_spark: SparkSession, key: str, value: str, words: str
) -> None:
    fine = {"kafka.fetch.max.bytes": "52428800", "kafka.client.rack": "eu-1a"}
    problems = kafka_option_problems(runtime_spark, _source({**fine, key: value}))
    assert len(problems) == 1, problems  # the others are fine, and not named
    assert problems[0].startswith(f"spec.source.options.{key}: Kafka's consumer refuses ")
    assert repr(value) in problems[0]
    assert words in problems[0], problems[0]


def test_values_kafka_takes_pass(runtime_spark: SparkSession) -> None:
    options = {
        "kafka.fetch.max.bytes": "52428800",
        "kafka.max.partition.fetch.bytes": "1048576",
        "kafka.client.rack": "eu-1a",
        "kafka.request.timeout.ms": "30000",
        "kafka.client.dns.lookup": "use_all_dns_ips",
        "kafka.ssl.endpoint.identification.algorithm": "",
        "kafka.metadata.max.age.ms": "60000",
        # A setting this Kafka does not know is its to ignore (it logs it), not a refusal.
        "kafka.some.future.setting": "1",
    }
    assert kafka_option_problems(runtime_spark, _source(options)) == []


def test_a_stream_with_a_refused_option_does_not_start(
    runtime_spark: SparkSession, tmp_path: Path
) -> None:
    document = manifest("bad-option", "orders", "127.0.0.1:1", tmp_path)
    document["spec"]["source"]["options"] = {"kafka.fetch.max.bytes": "lots"}
    with pytest.raises(InvalidSpecError) as error:
        start_checks(runtime_spark, pipeline(document))
    assert error.value.exit_code == ExitCode.CONFIG  # a driver is not restarted for it
    assert "spec.source.options.kafka.fetch.max.bytes" in error.value.message
    assert "Fix or remove the option in spec.source.options" in error.value.message
