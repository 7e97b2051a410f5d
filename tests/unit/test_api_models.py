"""The API models judge manifests: valid ones parse with defaults, each mistake names its field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from deltaflow_operator.api import DeltaIngestion
from deltaflow_operator.api.errors import describe
from deltaflow_operator.api.identity import identity
from support.manifests import INVALID_CASES, InvalidCase, valid_manifest

REPO = Path(__file__).resolve().parents[2]


def test_example_manifest_is_valid_and_defaults_fill_in() -> None:
    manifest = yaml.safe_load((REPO / "examples" / "orders.yaml").read_text())
    ingestion = DeltaIngestion.model_validate(manifest)
    assert ingestion.spec.scaling.max_executors == 8
    assert ingestion.spec.scaling.scale_down_stabilization_seconds == 300  # default
    assert ingestion.spec.source.fail_on_data_loss is True  # safe by default


def test_minimal_manifest_gets_safe_defaults() -> None:
    ingestion = DeltaIngestion.model_validate(
        {
            "metadata": {"name": "clicks", "namespace": "web"},
            "spec": {
                "source": {"bootstrapServers": "k:9092", "topic": "clicks"},
                "format": {"type": "raw"},
                "sink": {"tablePath": "file:///lake/clicks"},
            },
        }
    )
    spec = ingestion.spec
    assert spec.maintenance.vacuum.retention_hours == 168
    assert spec.executor.memory == "2g"
    assert spec.driver.memory == "1g"
    ids = identity(ingestion)
    assert ids.checkpoint_path == "file:///lake/_checkpoints/web/clicks"
    assert not ids.checkpoint_path.startswith(ids.table_path + "/")
    assert ids.dead_letter_table_path == "file:///lake/clicks_dead_letter"
    assert ids.consumer_group == "deltaflow.web.clicks"


@pytest.mark.parametrize("case", INVALID_CASES, ids=lambda c: c.id)
def test_each_mistake_is_rejected_naming_its_field(case: InvalidCase) -> None:
    with pytest.raises(ValidationError) as err:
        DeltaIngestion.model_validate(case.manifest())
    lines = describe(err.value)
    assert any(line.startswith(f"{case.field}:") for line in lines), lines


def test_the_corpus_is_large_and_every_case_is_a_different_mistake() -> None:
    assert len(INVALID_CASES) >= 30
    assert len({c.id for c in INVALID_CASES}) == len(INVALID_CASES)


def test_unsafe_vacuum_retention_needs_the_explicit_override() -> None:
    m = valid_manifest()
    m["spec"]["maintenance"]["vacuum"].update(retentionHours=24, allowUnsafeRetention=True)
    assert DeltaIngestion.model_validate(m).spec.maintenance.vacuum.retention_hours == 24


def test_topic_pattern_alone_is_valid() -> None:
    m = valid_manifest()
    del m["spec"]["source"]["topic"]
    m["spec"]["source"]["topicPattern"] = "orders-.*"
    assert DeltaIngestion.model_validate(m).spec.source.topic_pattern == "orders-.*"
