"""The driver picks the topics of spec.source.topicPattern as Spark's Kafka source does: the
pattern found in the name, internal topics left out (the regex dialect itself is checked against
the JVM in tests/integration/runtime/test_topic_pattern_dialect.py)."""

from __future__ import annotations

import pytest

from deltaflow_runtime.topics import matching_topics

TOPICS = [
    "orders",
    "orders-eu",
    "eu-orders-1",
    "payments",
    "__consumer_offsets",
    "__transaction_state",
    "__orders_audit",
]


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        # Searched, as Spark's default offset reader does (Regex.findFirstIn), not matched whole.
        ("orders", ["__orders_audit", "eu-orders-1", "orders", "orders-eu"]),
        ("orders-.*", ["eu-orders-1", "orders-eu"]),
        ("^orders-.*$", ["orders-eu"]),
        ("^orders$|^payments$", ["orders", "payments"]),
        ("[0-9]$", ["eu-orders-1"]),
        # Kafka's internal topics are never listed to Spark, whatever the pattern.
        ("^__", ["__orders_audit"]),
        ("^$", []),
    ],
)
def test_topics_are_those_the_pattern_is_found_in(pattern: str, expected: list[str]) -> None:
    assert matching_topics(pattern, TOPICS) == expected
