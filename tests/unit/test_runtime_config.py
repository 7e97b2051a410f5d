"""The runtime reads the same DeltaIngestion as the operator; mistakes are refused by field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from deltaflow_api.v1alpha1 import Trigger, duration_seconds
from deltaflow_runtime.config import (
    ConfigError,
    load_ingestion,
    local_path,
    localize,
    parse_ingestion,
)

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "orders.yaml"


def test_loads_the_example_manifest() -> None:
    ingestion = load_ingestion(EXAMPLE)
    assert ingestion.name == "orders"
    assert ingestion.spec.format.type == "json"
    assert ingestion.spec.sink.partition_by == ["country"]


def test_loads_the_operator_config_map_and_its_key(tmp_path: Path) -> None:
    document = yaml.safe_load(EXAMPLE.read_text())
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "orders-config"},
        "data": {"ingestion.yaml": yaml.safe_dump(document)},
    }
    as_map = tmp_path / "cm.yaml"
    as_map.write_text(yaml.safe_dump(config_map))
    as_key = tmp_path / "ingestion.yaml"
    as_key.write_text(config_map["data"]["ingestion.yaml"])
    assert load_ingestion(as_map) == load_ingestion(as_key) == load_ingestion(EXAMPLE)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda s: s["source"].update(topc="x"), "spec.source.topc"),
        (
            lambda s: s["scaling"].update(minExecutors=9, maxExecutors=2),
            "spec.scaling.maxExecutors",
        ),
        (lambda s: s["format"].pop("schema"), "spec.format.schema"),
        (lambda s: s["sink"].update(checkpointPath="s3a://lake/orders/_cp"), "checkpointPath"),
        (lambda s: s["maintenance"]["vacuum"].update(retentionHours=24), "retentionHours"),
        (lambda s: s.update(trigger={"interval": "ten seconds"}), "spec.trigger.interval"),
        (lambda s: s.update(freshness={"targetSeconds": 0}), "spec.freshness.targetSeconds"),
        (lambda s: s.pop("source"), "spec.source"),
    ],
)
def test_a_mistake_is_refused_naming_the_field(change: object, field: str) -> None:
    document = yaml.safe_load(EXAMPLE.read_text())
    change(document["spec"])  # type: ignore[operator]
    with pytest.raises(ConfigError) as refused:
        parse_ingestion(document, "orders.yaml")
    assert any(field in line for line in refused.value.lines), refused.value.lines
    assert field in refused.value.message


def test_unreadable_or_ambiguous_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_ingestion(tmp_path / "missing.yaml")
    two = tmp_path / "two.yaml"
    two.write_text(EXAMPLE.read_text() + "\n---\n" + EXAMPLE.read_text())
    with pytest.raises(ConfigError, match="exactly one DeltaIngestion"):
        load_ingestion(two)
    bad = tmp_path / "bad.yaml"
    bad.write_text("spec: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_ingestion(bad)


def test_localize_maps_object_store_paths_and_the_broker(tmp_path: Path) -> None:
    local = localize(
        load_ingestion(EXAMPLE), bootstrap_servers="127.0.0.1:9092", local_dir=tmp_path
    )
    sink = local.spec.sink
    assert local.spec.source.bootstrap_servers == "127.0.0.1:9092"
    assert sink.table_path == f"file://{tmp_path}/lake/orders"
    assert sink.checkpoint_path == f"file://{tmp_path}/lake/_checkpoints/data/orders"
    assert local.spec.dead_letter.table_path == f"file://{tmp_path}/lake/orders_dead_letter"
    assert sink.storage is None
    assert local.spec.format == load_ingestion(EXAMPLE).spec.format


def test_localize_with_a_storage_endpoint_keeps_the_object_store_and_only_moves_the_endpoint(
    tmp_path: Path,
) -> None:
    example = load_ingestion(EXAMPLE)
    local = localize(
        example,
        bootstrap_servers=None,
        local_dir=tmp_path,
        storage_endpoint="http://127.0.0.1:9000",
    )
    assert local.spec.sink.table_path == example.spec.sink.table_path == "s3a://lake/orders"
    assert local.spec.dead_letter.table_path == "s3a://lake/orders_dead_letter"
    assert local.spec.sink.storage is not None
    assert example.spec.sink.storage is not None
    assert local.spec.sink.storage.endpoint == "http://127.0.0.1:9000"
    assert (
        local.spec.sink.storage.model_copy(update={"endpoint": example.spec.sink.storage.endpoint})
        == example.spec.sink.storage
    )
    assert local.spec.source == example.spec.source


def test_local_paths_stay_local(tmp_path: Path) -> None:
    assert local_path("file:///data/t", tmp_path) == "file:///data/t"
    assert local_path("/data/t", tmp_path) == "/data/t"
    assert local_path("s3://b/k/t", tmp_path) == f"file://{tmp_path}/b/k/t"


@pytest.mark.parametrize(
    ("text", "seconds"), [("10s", 10.0), ("500ms", 0.5), ("2m", 120.0), ("1h", 3600.0)]
)
def test_trigger_seconds(text: str, seconds: float) -> None:
    assert duration_seconds(text) == seconds
    assert Trigger(interval=text).pinned_seconds == seconds
    assert Trigger().pinned_seconds is None  # unset: derived from spec.freshness
