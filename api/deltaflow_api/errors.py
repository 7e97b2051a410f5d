"""Turn a pydantic ValidationError into lines a data engineer can act on: field path, then fix."""

from __future__ import annotations

from pydantic import ValidationError

from deltaflow_api.rules import RuleViolationError


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def describe(error: ValidationError) -> list[str]:
    """One line per problem, each starting with its field path (``spec.scaling.maxExecutors``)."""
    lines: list[str] = []
    for item in error.errors():
        base = _path(tuple(item["loc"]))
        cause = (item.get("ctx") or {}).get("error")
        if isinstance(cause, RuleViolationError):
            for rule, message in cause.broken:
                field = f"{base}{rule.field_path or ''}".lstrip(".")
                lines.append(f"{field}: {message}")
            continue
        message = item["msg"]
        if item["type"] == "extra_forbidden":
            message = (
                "unknown field (check the spelling against `kubectl explain deltaingestion.spec`)"
            )
        elif item["type"] == "missing":
            message = "required field is missing"
        lines.append(f"{base}: {message}")
    return lines
