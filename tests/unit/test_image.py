"""The Dockerfile cannot be built here (no Docker engine): hold it to the project's pins instead."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from deltaflow_operator.builders.common import RUNTIME_UID

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = (REPO / "Dockerfile").read_text()


def _pins() -> dict[str, str]:
    text = (REPO / "stack/install/versions.env").read_text()
    return dict(re.findall(r"^([A-Z0-9_]+)=(\S+)", text, re.M))


def test_image_uses_the_pinned_uv_and_lock() -> None:
    assert f"uv=={_pins()['UV_VERSION']}" in DOCKERFILE
    assert "uv sync --frozen --no-dev" in DOCKERFILE


def test_image_resolves_the_same_connector_jars_as_the_local_stack() -> None:
    assert "stack/install/maven/spark-jars.pom.xml" in DOCKERFILE
    assert "stack/install/versions.env" in DOCKERFILE


def test_image_runs_as_the_uid_the_pods_require() -> None:
    assert f"USER {RUNTIME_UID}:{RUNTIME_UID}" in DOCKERFILE
    assert f"--uid {RUNTIME_UID}" in DOCKERFILE


def test_entrypoint_is_valid_shell_and_handles_executors() -> None:
    entrypoint = REPO / "image/entrypoint.sh"
    subprocess.run(["sh", "-n", str(entrypoint)], check=True)
    text = entrypoint.read_text()
    assert "KubernetesExecutorBackend" in text
    assert 'exec deltaflow "$@"' in text
