"""Fixtures of the data-plane tests: the shared real SparkSession with the runtime's settings."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from deltaflow_runtime.session import DEFAULT_CONF, PINNED_CONF

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Settings that can change on a running session (the rest are the same in devstack's conf).
_RUNTIME_SQL_CONF = {
    k: v
    for k, v in {**DEFAULT_CONF, **PINNED_CONF}.items()
    if k.startswith(("spark.databricks.delta.", "spark.sql.session."))
}


@pytest.fixture(scope="session")
def runtime_spark(spark: SparkSession) -> SparkSession:
    """The session-wide SparkSession with the runtime's Delta settings applied."""
    for key, value in _RUNTIME_SQL_CONF.items():
        spark.conf.set(key, value)
    return spark
