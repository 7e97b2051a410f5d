"""Generate the DeltaIngestion CustomResourceDefinition from the pydantic models.

pydantic's JSON schema is not a structural CRD schema as it comes: it uses ``$defs``/``$ref``,
``anyOf [X, null]`` for optionals, ``title``, ``const`` and ``additionalProperties: false``. This
module inlines references, turns optionals into "absent from required", drops what the API server
rejects, and attaches each model's rules as ``x-kubernetes-validations``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from deltaflow_api import v1alpha1 as api
from deltaflow_api.rules import Rule

CRD_FILE_NAME = f"{api.GROUP}_{api.PLURAL}.yaml"
_DROPPED_KEYS = {"title"}


def _models() -> dict[str, type[api.ApiModel]]:
    """Every API model by class name (the name pydantic uses in ``$defs``)."""
    found: dict[str, type[api.ApiModel]] = {}
    pending: list[type[api.ApiModel]] = [api.ApiModel]
    while pending:
        cls = pending.pop()
        for sub in cls.__subclasses__():
            found[sub.__name__] = sub
            pending.append(sub)
    return found


def strip_nones(value: Any) -> Any:
    """A JSON document without its null fields, recursively (as a merge patch stores it)."""
    if isinstance(value, dict):
        return {k: strip_nones(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [strip_nones(v) for v in value]
    return value


def _validations(rules: tuple[Rule, ...]) -> list[dict[str, str]]:
    return [rule.to_crd() for rule in rules]


def structural(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Turn one pydantic JSON-schema node into a structural OpenAPI v3 schema node."""
    node = dict(node)
    if "$ref" in node:
        name = node.pop("$ref").rsplit("/", 1)[-1]
        target = structural(defs[name], defs)
        rules = _models()[name].rules if name in _models() else ()
        if rules:
            target["x-kubernetes-validations"] = _validations(rules)
        node = {
            **target,
            **{k: v for k, v in node.items() if k != "description"},
            **({"description": node["description"]} if "description" in node else {}),
        }
    if "anyOf" in node:
        options = [o for o in node.pop("anyOf") if o.get("type") != "null"]
        if len(options) != 1:
            raise ValueError(f"only Optional[X] unions are supported in the API, got {options}")
        node = {**structural(options[0], defs), **node}
    if "const" in node:
        node["enum"] = [node.pop("const")]
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED_KEYS or (key == "default" and value is None):
            continue
        if key == "additionalProperties":
            if isinstance(value, dict):  # a map: dict[str, X]
                out[key] = structural(value, defs)
            # `false` (extra="forbid") is not structural; unknown fields are rejected by the
            # API server's strict field validation and by pydantic.
            continue
        if key == "properties":
            out[key] = {k: structural(v, defs) for k, v in value.items()}
        elif key == "items":
            out[key] = structural(value, defs)
        elif key == "default":
            out[key] = strip_nones(value)
        else:
            out[key] = value
    if out.get("required") == []:
        del out["required"]
    return out


def _status_schema(defs: dict[str, Any]) -> dict[str, Any]:
    schema = structural({"$ref": "#/$defs/DeltaIngestionStatus"}, defs)
    conditions = schema["properties"]["conditions"]
    conditions["x-kubernetes-list-type"] = "map"
    conditions["x-kubernetes-list-map-keys"] = ["type"]
    return schema


def openapi_schema() -> dict[str, Any]:
    """The CRD's ``openAPIV3Schema`` for v1alpha1."""
    full = api.DeltaIngestion.model_json_schema(by_alias=True, mode="validation")
    defs = full["$defs"]
    spec = structural({"$ref": "#/$defs/DeltaIngestionSpec"}, defs)
    return {
        "type": "object",
        "description": api.DeltaIngestion.__doc__,
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": _status_schema(defs),
        },
        "x-kubernetes-validations": _validations(api.NAME_RULES),
    }


def crd_manifest() -> dict[str, Any]:
    """The whole CustomResourceDefinition object."""
    ready = '.status.conditions[?(@.type=="Ready")]'
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{api.PLURAL}.{api.GROUP}",
            "labels": {
                "app.kubernetes.io/name": "deltaflow",
                "app.kubernetes.io/part-of": "deltaflow",
            },
        },
        "spec": {
            "group": api.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": api.KIND,
                "plural": api.PLURAL,
                "singular": api.SINGULAR,
                "listKind": f"{api.KIND}List",
                "shortNames": list(api.SHORT_NAMES),
                # Not in "all": `kubectl delete all` must not stop every stream.
                "categories": ["deltaflow"],
            },
            "versions": [
                {
                    "name": api.VERSION,
                    "served": True,
                    "storage": True,
                    # /scale: kubectl scale, an HPA or KEDA set the executor count when
                    # spec.scaling.mode is manual (the CEL rules refuse it in mode lag).
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.scaling.executors",
                            "statusReplicasPath": ".status.executors.current",
                            "labelSelectorPath": ".status.executors.selector",
                        },
                    },
                    "additionalPrinterColumns": [
                        {"name": "Ready", "type": "string", "jsonPath": f"{ready}.status"},
                        {"name": "Reason", "type": "string", "jsonPath": f"{ready}.reason"},
                        {"name": "Lag", "type": "integer", "jsonPath": ".status.lag.records"},
                        {"name": "Lag(s)", "type": "number", "jsonPath": ".status.lag.seconds"},
                        {
                            "name": "Executors",
                            "type": "integer",
                            "jsonPath": ".status.executors.current",
                        },
                        {
                            "name": "Desired",
                            "type": "integer",
                            "jsonPath": ".status.executors.desired",
                        },
                        {
                            "name": "Fresh(p99)",
                            "type": "number",
                            "jsonPath": ".status.freshness.p99Seconds",
                        },
                        {
                            "name": "Scaling",
                            "type": "string",
                            "jsonPath": ".status.autoscaler.verdict",
                            "priority": 1,
                        },
                        # local, executors or pooled: where each stream runs, at a glance.
                        {
                            "name": "Placement",
                            "type": "string",
                            "jsonPath": ".status.placement.mode",
                        },
                        {
                            "name": "Pool",
                            "type": "string",
                            "jsonPath": ".status.placement.pool",
                            "priority": 1,
                        },
                        {
                            "name": "Topic",
                            "type": "string",
                            "jsonPath": ".spec.source.topic",
                            "priority": 1,
                        },
                        {
                            "name": "Table",
                            "type": "string",
                            "jsonPath": ".spec.sink.tablePath",
                            "priority": 1,
                        },
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                    "schema": {"openAPIV3Schema": openapi_schema()},
                }
            ],
        },
    }


class _PlainDumper(yaml.SafeDumper):
    """Writes repeated sub-schemas out in full: anchors and aliases confuse human readers."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def render() -> str:
    """The CRD as the YAML committed in ``crds/`` and the chart."""
    header = "# Generated from deltaflow_api by `deltaflow crd`. Do not edit by hand.\n"
    body = yaml.dump(crd_manifest(), Dumper=_PlainDumper, sort_keys=False, width=100)
    return header + body


def write(repo_root: Path) -> list[Path]:
    """Write the CRD into ``crds/`` and the Helm chart's ``crds/``; return the paths written."""
    text = render()
    paths = [
        repo_root / "crds" / CRD_FILE_NAME,
        repo_root / "charts" / "deltaflow" / "crds" / CRD_FILE_NAME,
    ]
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return paths
