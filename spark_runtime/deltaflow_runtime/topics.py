"""Which topics ``spec.source.topicPattern`` names: the ones Spark's Kafka source reads.

Spark's default offset reader (``KafkaOffsetReaderAdmin``) lists the cluster's topics without the
internal ones and keeps each topic the pattern is *found* in (``Regex.findFirstIn``, a
java.util.regex search), not only the names it matches whole: ``orders-.*`` also reads
``eu-orders-1``. The driver measures lag and retention on the topics :func:`matching_topics`
picks, with Python's ``re.search`` over the same list: admission holds the pattern to a subset
both engines read alike (``rules.TOPIC_PATTERN_DIALECT``), and :func:`check_topic_pattern`
compiles it in the JVM at start, which also refuses what a syntax subset cannot see (a range
``[z-a]``, a count ``{3,1}``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from deltaflow_api.v1alpha1 import KafkaSource
from deltaflow_runtime.errors import InvalidSpecError
from deltaflow_runtime.jvm import jvm

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Kafka's internal topics (org.apache.kafka.common.internals.Topic): the admin client's
# listTopics() leaves them out, so Spark never reads them whatever the pattern.
INTERNAL_TOPICS = frozenset(
    ("__consumer_offsets", "__transaction_state", "__share_group_state", "__cluster_metadata")
)


class TopicPatternError(InvalidSpecError):
    """spec.source.topicPattern does not compile; the message names the field."""


def matching_topics(pattern: str, topics: Iterable[str]) -> list[str]:
    """The topics Spark's subscribePattern reads among ``topics``, sorted."""
    regex = re.compile(pattern)
    return sorted(t for t in topics if t not in INTERNAL_TOPICS and regex.search(t) is not None)


def _java_error(spark: SparkSession, pattern: str) -> str | None:
    """Why java.util.regex refuses ``pattern`` (what Spark compiles it with), None if it does
    not."""
    from pyspark.errors import PySparkException

    try:
        jvm(spark).java.util.regex.Pattern.compile(pattern)
    except PySparkException as error:  # PatternSyntaxException, as PySpark converts it
        return str(error).splitlines()[0]
    except Exception as error:  # what PySpark does not convert: py4j's text names the class
        return " ".join(str(error).split())[:300]
    return None


def check_topic_pattern(spark: SparkSession | None, source: KafkaSource) -> None:
    """Refuse a topicPattern Spark (java.util.regex) or the lag measure (Python's re) cannot
    compile: Spark would fail every start, and the lag would never be measured. Without
    ``spark`` (before the JVM starts), Python's judgement only."""
    pattern = source.topic_pattern
    if pattern is None:
        return
    problems = []
    java = _java_error(spark, pattern) if spark is not None else None
    if java is not None:
        problems.append(f"Java (Spark's Kafka source) refuses it: {java}")
    try:
        re.compile(pattern)
    except re.error as error:
        problems.append(f"Python (the lag measure) refuses it: {error}")
    if problems:
        raise TopicPatternError(
            f"spec.source.topicPattern: {pattern!r} is not a regular expression both read: "
            + "; ".join(problems)
            + ". Fix the pattern (topicPattern is immutable: create a new DeltaIngestion with "
            "the corrected one)"
        )
