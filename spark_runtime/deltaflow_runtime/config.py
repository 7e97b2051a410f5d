"""The pipeline config: a DeltaIngestion read from a manifest file or from the operator's ConfigMap.

The runtime judges a manifest with the same pydantic models as the operator and the API server, so
``deltaflow run -f`` refuses exactly what ``kubectl apply`` would, naming the field.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from deltaflow_api import DeltaIngestion
from deltaflow_api.errors import describe
from deltaflow_api.identity import StreamIdentity, identity, paths_off_volumes
from deltaflow_runtime.errors import InvalidSpecError

# The key of the operator's ConfigMap that holds the whole DeltaIngestion as YAML.
CONFIG_MAP_KEY = "ingestion.yaml"

_OBJECT_STORE = re.compile(r"^(s3a|s3)://(?P<rest>.+)$")  # the object stores the API admits


class ConfigError(InvalidSpecError):
    """The pipeline config cannot be used; ``lines`` name each field and what is wrong with it."""

    def __init__(self, source: str, lines: list[str]) -> None:
        super().__init__(f"{source}: " + "; ".join(lines))
        self.source = source
        self.lines = lines

    @property
    def message(self) -> str:
        """A multi-line message for a terminal or a pod log."""
        body = "\n".join(f"  - {line}" for line in self.lines)
        return f"{self.source} is not a valid DeltaIngestion:\n{body}"


def parse_ingestion(document: Mapping[str, Any], source: str = "manifest") -> DeltaIngestion:
    """Validate one YAML document: a DeltaIngestion, or a ConfigMap holding one under
    ``data["ingestion.yaml"]`` (what the operator renders)."""
    if document.get("kind") == "ConfigMap":
        data = document.get("data") or {}
        if CONFIG_MAP_KEY not in data:
            raise ConfigError(source, [f"data.{CONFIG_MAP_KEY}: required key is missing"])
        inner = yaml.safe_load(data[CONFIG_MAP_KEY])
        if not isinstance(inner, Mapping):
            raise ConfigError(source, [f"data.{CONFIG_MAP_KEY}: is not a YAML mapping"])
        return parse_ingestion(inner, f"{source} (data.{CONFIG_MAP_KEY})")
    kind = document.get("kind", "DeltaIngestion")
    if kind != "DeltaIngestion":
        raise ConfigError(source, [f"kind: expected DeltaIngestion, got {kind!r}"])
    try:
        return DeltaIngestion.model_validate(dict(document))
    except ValidationError as error:
        raise ConfigError(source, describe(error)) from None


def load_ingestion(path: Path) -> DeltaIngestion:
    """Read the one DeltaIngestion in ``path`` (a manifest, a mounted ConfigMap key, or a ConfigMap
    manifest); a file with several documents must hold exactly one DeltaIngestion."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(str(path), [f"cannot read the file: {error.strerror}"]) from None
    return ingestion_from_text(text, str(path))


def ingestion_from_text(text: str, where: str) -> DeltaIngestion:
    """The one DeltaIngestion in a manifest's text (``where`` names it in errors)."""
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as error:
        raise ConfigError(where, [f"not valid YAML: {error}"]) from None
    if not all(isinstance(d, Mapping) for d in documents):
        raise ConfigError(where, ["every YAML document must be a mapping"])
    candidates = [d for d in documents if d.get("kind") in ("DeltaIngestion", "ConfigMap", None)]
    if len(candidates) != 1:
        raise ConfigError(
            where, [f"expected exactly one DeltaIngestion, found {len(candidates)} documents"]
        )
    return parse_ingestion(candidates[0], where)


def local_path(uri: str, local_dir: Path) -> str:
    """Map an object-store URI to a ``file://`` path under ``local_dir`` (same bucket/key layout);
    local paths are returned unchanged."""
    match = _OBJECT_STORE.match(uri)
    if match is None:
        return uri
    return f"file://{(local_dir / match['rest']).resolve()}"


def localize(
    ingestion: DeltaIngestion,
    *,
    bootstrap_servers: str | None,
    local_dir: Path,
    storage_endpoint: str | None = None,
) -> DeltaIngestion:
    """The same ingestion for a local try-out: another broker, and object-store paths mapped to
    ``local_dir`` (storage credentials dropped) — or, with ``storage_endpoint``, kept on the object
    store at that endpoint (the keys then come from ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``
    in the environment). Re-validated, so the result obeys every rule."""
    wire = ingestion.model_dump(by_alias=True, exclude_none=True, exclude={"status"})
    source, sink = wire["spec"]["source"], wire["spec"]["sink"]
    if bootstrap_servers:
        source["bootstrapServers"] = bootstrap_servers
    if storage_endpoint is not None:
        sink.setdefault("storage", {})["endpoint"] = storage_endpoint
        return DeltaIngestion.model_validate(wire)
    ident = identity(ingestion)
    sink["tablePath"] = local_path(ident.table_path, local_dir)
    # Pin the derived paths before the table moves, so they move with it consistently.
    sink["checkpointPath"] = local_path(ident.checkpoint_path, local_dir)
    sink.pop("storage", None)
    wire["spec"]["deadLetter"] = {"tablePath": local_path(ident.dead_letter_table_path, local_dir)}
    return DeltaIngestion.model_validate(wire)


@dataclass(frozen=True)
class Pipeline:
    """A validated ingestion and the stream identity the operator derives from it."""

    ingestion: DeltaIngestion
    identity: StreamIdentity

    @classmethod
    def of(cls, ingestion: DeltaIngestion) -> Pipeline:
        """Bundle an ingestion with its identity."""
        return cls(ingestion, identity(ingestion))


def check_paths_outlive_the_pod(ingestion: DeltaIngestion) -> None:
    """In a pod (the operator's driver and pool pods name theirs in DELTAFLOW_POD_NAME), refuse
    a table, dead-letter table or checkpoint on its own disk: admission cannot tell a pod's run
    from ``deltaflow run -f`` on a laptop, where a local folder is the point."""
    from deltaflow_api.driver_pod import ENV_POD_NAME

    if not os.environ.get(ENV_POD_NAME, "").strip():
        return
    problems = paths_off_volumes(ingestion)
    if problems:
        raise InvalidSpecError("; ".join(problems))
