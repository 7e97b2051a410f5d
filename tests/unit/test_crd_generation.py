"""crds/ is generated from the models: no drift, and the schema is structural."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from deltaflow_api import crd, reference

REPO = Path(__file__).resolve().parents[2]


def test_committed_crds_match_the_models() -> None:
    expected = crd.render()
    for path in (
        REPO / "crds" / crd.CRD_FILE_NAME,
        REPO / "charts/deltaflow/crds" / crd.CRD_FILE_NAME,
    ):
        assert path.read_text() == expected, f"{path} drifted from the models: run `deltaflow crd`"
    page = REPO / reference.REFERENCE_PATH
    assert page.read_text() == reference.render(), f"{page} drifted: run `deltaflow crd`"


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


def test_volume_and_cpu_rules_reach_the_api_server() -> None:
    spec = crd.openapi_schema()["properties"]["spec"]
    spec_rules = [r["rule"] for r in spec["x-kubernetes-validations"]]
    for field in ("name", "mountPath"):
        unique = f"self.volumes.all(a, self.volumes.exists_one(b, b.{field} == a.{field}))"
        assert any(unique in rule for rule in spec_rules), field
    volumes = spec["properties"]["volumes"]
    assert volumes["maxItems"] == 8
    item = volumes["items"]
    assert item["required"] == ["name", "claimName", "mountPath"]
    assert item["properties"]["readOnly"]["default"] is False
    rules = {r["fieldPath"]: r["rule"] for r in item["x-kubernetes-validations"]}
    for reserved in ("/", "/tmp", "/etc/deltaflow"):  # the same list the Python check reads
        assert f"self.mountPath == '{reserved}'" in rules[".mountPath"]
    assert "'config'" in rules[".name"]
    assert "'kafka-ca'" in rules[".name"]
    for side in ("driver", "executor"):
        core_request = spec["properties"][side]["properties"]["coreRequest"]
        assert core_request["type"] == "string"
        assert "pattern" in core_request
        assert "coreRequest" not in spec["properties"][side].get("required", [])


def test_crd_has_status_subresource_and_columns() -> None:
    version = yaml.safe_load(crd.render())["spec"]["versions"][0]
    assert version["subresources"]["status"] == {}
    # kubectl scale / an HPA write spec.scaling.executors and read the registered executors.
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.scaling.executors",
        "statusReplicasPath": ".status.executors.current",
        "labelSelectorPath": ".status.executors.selector",
    }
    columns = {c["name"] for c in version["additionalPrinterColumns"]}
    assert {"Ready", "Lag", "Lag(s)", "Executors", "Desired", "Fresh(p99)", "Age"} <= columns
    schema = version["schema"]["openAPIV3Schema"]
    executors = schema["properties"]["status"]["properties"]["executors"]["properties"]
    # Unknown is absent, never a default 0 that looks measured.
    assert all("default" not in executors[k] for k in ("desired", "current", "pending"))


def _undescribed(node: dict[str, Any], path: str) -> list[str]:
    missing: list[str] = []
    for name, child in (node.get("properties") or {}).items():
        where = f"{path}.{name}"
        if not child.get("description"):
            missing.append(where)
        missing += _undescribed(child, where)
        if isinstance(child.get("items"), dict):
            missing += _undescribed(child["items"], f"{where}[]")
    return missing


def test_kubectl_explain_answers_for_every_spec_field() -> None:
    """`kubectl explain deltaingestion.spec.<field>` prints the field's description: each one,
    nested and in list items, has one."""
    version = yaml.safe_load(crd.render())["spec"]["versions"][0]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert _undescribed(spec, "spec") == []
