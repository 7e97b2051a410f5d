"""spec.source.topicPattern has one dialect: every pattern admission accepts is read by
java.util.regex (what Spark's Kafka source compiles it with) and by Python's re (the driver's lag
measure) alike, on every topic name; what a syntax check cannot see fails at start, naming the
field. Real Spark: the JVM answers through py4j."""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from runtime_kit import run_cli

from deltaflow_api.rules import topic_pattern_in_dialect
from deltaflow_api.v1alpha1 import KafkaSource
from deltaflow_runtime.topics import TopicPatternError, check_topic_pattern

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark]

REPO = Path(__file__).resolve().parents[3]

TOPIC_NAMES = st.from_regex(r"[a-zA-Z0-9._-]{1,24}", fullmatch=True)
SOME_TOPICS = [
    "orders",
    "orders-eu",
    "eu-orders-1",
    "payments.v2",
    "a",
    "_x",
    "x_",
    "-",
    ".",
    "..",
    "A-Z",
    "aaaa",
    "x9y",
    "2026",
]


def _java(spark: SparkSession) -> Any:
    return spark.sparkContext._jvm


def _java_pattern(spark: SparkSession, pattern: str) -> Any:
    """The compiled Java pattern, or None when java.util.regex refuses it."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    try:
        return _java(spark).java.util.regex.Pattern.compile(pattern)
    except (Py4JJavaError, PySparkException):  # PySpark converts IllegalArgumentException
        return None


def _python_pattern(pattern: str) -> re.Pattern[str] | None:
    with warnings.catch_warnings():  # "possible nested set": what the dialect leaves out
        warnings.simplefilter("ignore", FutureWarning)
        try:
            return re.compile(pattern)
        except re.error:
            return None


# Patterns built from the dialect's grammar (hypothesis' from_regex over the dialect's regex takes
# minutes for a few hundred), with reversed ranges and counts that both engines must refuse.
_ESCAPES = st.sampled_from([r"\.", r"\-", r"\_", r"\d", r"\D", r"\w", r"\W"])
_CLASS_ITEMS = st.one_of(
    st.sampled_from(list("abxz09._AZ")),
    st.sampled_from(["a-z", "0-9", "A-Z", "b-y", "x-z", "a-c", "0-5", "C-X", "z-a"]),
    _ESCAPES,
)
_CLASSES = st.builds(
    lambda negated, first, items, last: f"[{negated}{first}{''.join(items)}{last}]",
    st.sampled_from(["", "^"]),
    st.sampled_from(["", "-"]),
    st.lists(_CLASS_ITEMS, min_size=1, max_size=3),
    st.sampled_from(["", "-"]),
)
_QUANTIFIERS = st.sampled_from([*[""] * 12, "*", "+", "?", "{2}", "{1,3}", "{0,}", "{3,1}"])
_PIECES = st.builds(
    str.__add__,
    st.one_of(st.sampled_from(list("aoxrsdeZ09_-.")), _ESCAPES, _CLASSES),
    _QUANTIFIERS,
)
_SEQUENCES = st.lists(_PIECES, max_size=4).map("".join)
_GROUPS = st.builds(
    lambda opener, branches, quantifier: f"({opener}{'|'.join(branches)}){quantifier}",
    st.sampled_from(["", "?:"]),
    st.lists(_SEQUENCES, min_size=1, max_size=3),
    _QUANTIFIERS,
)
_ALTERNATIVES = st.builds(
    lambda start, parts, end: f"{start}{''.join(parts)}{end}",
    st.sampled_from(["", "^"]),
    st.lists(st.one_of(_PIECES, _GROUPS), max_size=4),
    st.sampled_from(["", "$"]),
)
DIALECT_PATTERNS = st.lists(_ALTERNATIVES, min_size=1, max_size=3).map("|".join)


@settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(pattern=DIALECT_PATTERNS, topics=st.lists(TOPIC_NAMES, max_size=6))
def test_java_and_python_read_every_admitted_pattern_alike(
    runtime_spark: SparkSession, pattern: str, topics: list[str]
) -> None:
    assert topic_pattern_in_dialect(pattern)
    java, python = _java_pattern(runtime_spark, pattern), _python_pattern(pattern)
    # Both compile it or neither does (a range [z-a] or a count {3,1}: refused at start).
    assert (java is None) == (python is None), pattern
    if java is None or python is None:
        return
    for topic in [*SOME_TOPICS, *topics]:
        # Spark keeps a topic the pattern is found in (Regex.findFirstIn: Matcher.find).
        found_by_java = bool(java.matcher(topic).find())
        assert found_by_java == (python.search(topic) is not None), (pattern, topic)


def _reads(spark: SparkSession, pattern: str, topic: str) -> bool | None:
    """Java's answer (found in ``topic``?), None when it refuses the pattern."""
    java = _java_pattern(spark, pattern)
    return None if java is None else bool(java.matcher(topic).find())


def _python_reads(pattern: str, topic: str) -> bool | None:
    python = _python_pattern(pattern)
    return None if python is None else python.search(topic) is not None


@pytest.mark.parametrize(
    ("pattern", "topic"),
    [
        ("[[a]]", "a"),  # Java: a nested class (a); Python: [ or a, then a literal ]
        (r"\Qa.b\E", "a.b"),  # Java: a quoted literal; Python: no such escape
        ("a{,2}", "a"),  # Java: no such count; Python: zero to two a
        ("a(?i)b", "aB"),  # Java: flags anywhere; Python: at the start only
    ],
)
def test_what_the_dialect_leaves_out_is_where_they_differ(
    runtime_spark: SparkSession, pattern: str, topic: str
) -> None:
    assert not topic_pattern_in_dialect(pattern)
    assert _reads(runtime_spark, pattern, topic) != _python_reads(pattern, topic)


def _source(pattern: str) -> KafkaSource:
    return KafkaSource(bootstrap_servers="k:9092", topic_pattern=pattern)


@pytest.mark.parametrize("pattern", ["orders-[z-a]", "orders{3,1}", "(a|b){2,1}"])
def test_a_pattern_java_refuses_fails_at_start_naming_the_field(
    runtime_spark: SparkSession, pattern: str
) -> None:
    assert topic_pattern_in_dialect(pattern)  # admitted: only compiling it shows the mistake
    with pytest.raises(TopicPatternError) as error:
        check_topic_pattern(runtime_spark, _source(pattern))
    message = str(error.value)
    assert message.startswith("spec.source.topicPattern: ")
    assert "Java (Spark's Kafka source) refuses it" in message


@pytest.mark.parametrize("pattern", ["orders-.*", "^(orders|payments)-[a-z]{2}$", r"\w+\.v\d+"])
def test_a_valid_pattern_passes_the_start_check(runtime_spark: SparkSession, pattern: str) -> None:
    check_topic_pattern(runtime_spark, _source(pattern))


def test_deltaflow_run_refuses_the_pattern_before_reading_kafka(tmp_path: Path) -> None:
    document = yaml.safe_load((REPO / "examples" / "orders.yaml").read_text())
    source = document["spec"]["source"]
    source.pop("topic")
    source.update(topicPattern="orders-[z-a]", bootstrapServers="127.0.0.1:1")
    manifest = tmp_path / "pattern.yaml"
    manifest.write_text(yaml.safe_dump(document))
    result = run_cli(
        ["run", "-f", str(manifest), "--available-now", "--metrics-port", "0", "--cores", "1"],
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert "spec.source.topicPattern: 'orders-[z-a]' is not a regular expression" in (result.stderr)
