"""docs/crd-reference.md, generated from the same schema as the CRD (``deltaflow crd`` writes
both; a unit test fails when the committed page drifts from the models)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import deltaflow_api as api
from deltaflow_api import crd
from deltaflow_api.failures import (
    COMMAND_FAILURES,
    FailureReason,
    restart_helps,
    what_to_do,
)

REFERENCE_PATH = Path("docs") / "crd-reference.md"


def _type(node: dict[str, Any]) -> str:
    kind = str(node.get("type", "any"))
    if kind == "array":
        return f"list of {_type(node.get('items') or {})}"
    if kind == "object" and isinstance(node.get("additionalProperties"), dict):
        return f"map of {_type(node['additionalProperties'])}"
    if node.get("x-kubernetes-preserve-unknown-fields"):
        return "object (passed on as is)"
    return kind


def _constraints(node: dict[str, Any]) -> str:
    parts: list[str] = []
    if "enum" in node:
        parts.append("one of " + ", ".join(f"`{v}`" for v in node["enum"]))
    for key, text in (("minimum", ">="), ("maximum", "<=")):
        if key in node:
            parts.append(f"{text} {node[key]}")
    for key, text in (("maxLength", "at most {} characters"), ("maxItems", "at most {} items")):
        if key in node:
            parts.append(text.format(node[key]))
    if "maxProperties" in node:
        parts.append(f"at most {node['maxProperties']} entries")
    return "; ".join(parts)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _rows(node: dict[str, Any], path: str, out: list[str]) -> None:
    required = set(node.get("required") or [])
    for name, child in (node.get("properties") or {}).items():
        where = f"{path}.{name}"
        default = child.get("default")
        shown = "" if default is None else f"`{json.dumps(default)}`"
        out.append(
            f"| `{where}` | {_type(child)}{' (required)' if name in required else ''} | {shown} "
            f"| {_cell(str(child.get('description', '')))} | {_cell(_constraints(child))} |"
        )
        _rows(child, where, out)
        items = child.get("items")
        if isinstance(items, dict) and items.get("properties"):
            _rows(items, f"{where}[]", out)


def _rules(node: dict[str, Any], path: str, out: list[str]) -> None:
    for rule in node.get("x-kubernetes-validations") or []:
        where = (path + str(rule.get("fieldPath", ""))).lstrip(".") or "metadata.name"
        out.append(f"- `{where}`: {_cell(str(rule['message']))}")
    for name, child in (node.get("properties") or {}).items():
        _rules(child, f"{path}.{name}", out)
        items = child.get("items")
        if isinstance(items, dict):
            _rules(items, f"{path}.{name}[]", out)


def _restarted(reason: FailureReason) -> str:
    if reason in COMMAND_FAILURES:
        return "a command's result"
    return "yes, with backoff" if restart_helps(reason) else "no: waits for you"


def render() -> str:
    """The reference page."""
    version = crd.crd_manifest()["spec"]["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    head = "| field | type | default | description | limits |\n|---|---|---|---|---|"
    spec_rows: list[str] = []
    _rows(schema["properties"]["spec"], "spec", spec_rows)
    status_rows: list[str] = []
    _rows(schema["properties"]["status"], "status", status_rows)
    rules: list[str] = []
    _rules(schema, "", rules)
    columns = "\n".join(
        f"| {c['name']} | `{c['jsonPath']}` | {'wide' if c.get('priority') else 'default'} |"
        for c in version["additionalPrinterColumns"]
    )
    failures = "\n".join(
        f"| `{r.value}` | {_restarted(r)} | {_cell(what_to_do(r))} |" for r in FailureReason
    )
    generated = "<!-- Generated from deltaflow_api by `deltaflow crd`. Do not edit. -->"
    return f"""{generated}
# DeltaIngestion reference ({api.GROUP}/{api.VERSION})

Every field of the resource as the API server validates it (the same schema as
`crds/{crd.CRD_FILE_NAME}`). `kubectl explain deltaingestion.spec.<field>` prints the same
descriptions.

## spec

{head}
{chr(10).join(spec_rows)}

## Rules across fields

The API server refuses a manifest that breaks one of these (the message is what it prints):

{chr(10).join(rules)}

## status

Written by the operator only.

{head}
{chr(10).join(status_rows)}

## kubectl get columns

| column | from | shown |
|---|---|---|
{columns}

## Failure reasons

What a driver that stops reports (its termination message; the operator shows it in the `Ready`
or `Degraded` condition and an Event), and what a maintenance job or `deltaflow
recover-checkpoint` ends with. A driver stopped for a reason a restart cannot fix is not
restarted until the resource changes: the last column says what to do.

| reason | driver restarted | what to do |
|---|---|---|
{failures}
"""


def write(repo_root: Path) -> Path:
    """Write the page into ``docs/``; return its path."""
    path = repo_root / REFERENCE_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render())
    return path
