"""Every name derived from an accepted metadata.name fits its kind's limit (and Spark's)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from deltaflow_api import DeltaIngestion
from deltaflow_api.names import CRONJOB, DNS_LABEL, MAX_NAME_LENGTH, executor_pod_name
from deltaflow_operator.builders import driver as b
from deltaflow_operator.reconcile import children
from deltaflow_operator.settings import Settings
from support.manifests import valid_manifest

SETTINGS = Settings(image="deltaflow:1.2.3")
# What the API server enforces per kind (CronJob: the controller's own limit).
LIMITS = {"CronJob": CRONJOB, "Service": DNS_LABEL, "Pod": DNS_LABEL}


def _ingestion(name: str) -> DeltaIngestion:
    m = valid_manifest(name=name)
    m["metadata"].update(uid="0000-1111", generation=1)
    return DeltaIngestion.model_validate(m)


def _all_children(ingestion: DeltaIngestion) -> list[dict[str, Any]]:
    return [*children(ingestion, SETTINGS), b.driver_pod(ingestion, SETTINGS)]


def test_the_longest_accepted_name_gives_children_that_all_fit() -> None:
    name = "a" * MAX_NAME_LENGTH
    ingestion = _ingestion(name)
    for child in _all_children(ingestion):
        limit = LIMITS.get(child["kind"], 253)
        assert len(child["metadata"]["name"]) <= limit, child["kind"]
    prefix = b.spark_conf(ingestion, SETTINGS)["spark.kubernetes.executor.podNamePrefix"]
    assert len(prefix) <= 47  # Spark refuses a longer prefix at start
    assert len(executor_pod_name(name, 2**31 - 1)) <= DNS_LABEL


def test_one_character_more_is_refused_naming_the_child_it_would_break() -> None:
    with pytest.raises(ValidationError) as error:
        _ingestion("a" * (MAX_NAME_LENGTH + 1))
    assert "metadata.name" in str(error.value)
    assert "OPTIMIZE CronJob" in str(error.value)
    # ... because that child really would not fit: the limit is tight, not arbitrary.
    longest = max(
        (len(c["metadata"]["name"]), c["kind"])
        for c in _all_children(_ingestion("a" * MAX_NAME_LENGTH))
        if c["kind"] == "CronJob"
    )
    assert longest == (CRONJOB, "CronJob")


def test_executor_pods_are_named_once_with_exec() -> None:
    conf = b.spark_conf(_ingestion("orders"), SETTINGS)
    prefix = conf["spark.kubernetes.executor.podNamePrefix"]
    assert prefix == "orders"
    assert executor_pod_name("orders", 3) == "orders-exec-3"  # Spark adds "-exec-<id>"
