"""The installers' cache discipline: complete entries are reused, half-written ones are redone,
and a failed step names what failed and how to rerun it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from devstack.install import INSTALL_DIR, REPO_ROOT


def _bash(script: str, cache: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO_ROOT,
        env={**os.environ, "DELTAFLOW_CACHE": str(cache), **env},
    )


_BUILDER = f"""
source {INSTALL_DIR}/lib.sh
builds=0
fill() {{ echo built > "$1/payload"; echo build >> "$DELTAFLOW_CACHE/build-count"; }}
dest=$(cache_entry part v1)
is_complete "$dest" || build_entry "$dest" fill
cat "$dest/payload"
"""


def test_a_complete_entry_is_reused(tmp_path: Path) -> None:
    for _ in range(2):
        assert _bash(_BUILDER, tmp_path).stdout.strip() == "built"
    assert (tmp_path / "build-count").read_text().count("build") == 1


def test_a_half_written_entry_is_rebuilt(tmp_path: Path) -> None:
    # An interrupted run left the entry without its completion marker.
    partial = tmp_path / "part" / "v1"
    partial.mkdir(parents=True)
    (partial / "payload").write_text("trunc")
    (tmp_path / "part" / ".staging-v1-123").mkdir()

    assert _bash(_BUILDER, tmp_path).stdout.strip() == "built"
    assert (partial / ".complete").exists()
    assert sorted(p.name for p in (tmp_path / "part").iterdir()) == ["v1"]


def test_an_entry_of_another_version_is_replaced(tmp_path: Path) -> None:
    _bash(_BUILDER, tmp_path)
    bumped = _BUILDER.replace("cache_entry part v1", "cache_entry part v2")
    assert _bash(bumped, tmp_path).stdout.strip() == "built"
    assert sorted(p.name for p in (tmp_path / "part").iterdir()) == ["v2"]


def test_a_failed_download_names_the_step_to_rerun(tmp_path: Path) -> None:
    versions = (INSTALL_DIR / "versions.env").read_text()
    bad = tmp_path / "versions.env"
    bad.write_text(versions.replace("KAFKA_VERSION=", "KAFKA_VERSION=0.0.404-missing #"))
    maven_repo = Path(os.environ.get("HOME", "/root")) / ".cache/deltaflow/maven/repository"
    proc = _bash(
        f"bash {INSTALL_DIR}/kafka.sh",
        tmp_path / "cache",
        DELTAFLOW_VERSIONS_FILE=str(bad),
        DELTAFLOW_MAVEN_REPO=str(maven_repo),
    )
    assert proc.returncode != 0
    assert "FAILED" in proc.stderr
    assert "kafka_2.13:0.0.404-missing" in proc.stderr
    assert "rerun this step with: bash stack/install/kafka.sh" in proc.stderr
    # Nothing half-written is left to be mistaken for a finished install.
    assert not list((tmp_path / "cache" / "kafka").glob("*/.complete"))
