"""crds/ is generated from the models: no drift, and the schema is structural."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from deltaflow_operator.api import crd

REPO = Path(__file__).resolve().parents[2]


def test_committed_crds_match_the_models() -> None:
    expected = crd.render()
    for path in (
        REPO / "crds" / crd.CRD_FILE_NAME,
        REPO / "charts/deltaflow/crds" / crd.CRD_FILE_NAME,
    ):
        assert path.read_text() == expected, f"{path} drifted from the models: run `deltaflow crd`"


def _walk(node: Any, path: str = "") -> list[str]:
    problems: list[str] = []
    if isinstance(node, dict):
        for bad in ("$ref", "$defs", "anyOf", "title", "const"):
            if bad in node:
                problems.append(f"{path}: {bad}")
        if node.get("additionalProperties") is False:
            problems.append(f"{path}: additionalProperties false")
        if "properties" in node and node.get("type") != "object":
            problems.append(f"{path}: properties without type object")
        for key, value in node.items():
            problems += _walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            problems += _walk(value, f"{path}[{i}]")
    return problems


def test_schema_is_structural() -> None:
    schema = crd.openapi_schema()
    assert _walk(schema) == []


def test_cross_field_rules_are_in_the_crd() -> None:
    text = crd.render()
    for rule in (
        "self.maxExecutors >= self.minExecutors",
        "has(self.topic) != has(self.topicPattern)",
        "self.retentionHours >= 168 || self.allowUnsafeRetention",
        "oldSelf.checkpointPath",
    ):
        assert rule in text


def test_crd_has_status_subresource_and_columns() -> None:
    version = yaml.safe_load(crd.render())["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"] for c in version["additionalPrinterColumns"]}
    assert {"Ready", "Lag", "Executors", "Age"} <= columns
