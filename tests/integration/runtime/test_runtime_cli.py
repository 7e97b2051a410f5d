"""``deltaflow run -f`` through the real console script: the example manifest from the local Kafka
into a local table, and a manifest with a mistake refused by field."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from runtime_kit import (
    DELTAFLOW,
    create_topic,
    example_on_topic,
    log_end_offsets,
    order,
    produce,
    read_table,
    run_cli,
    unique,
)

from devstack.kafka import KafkaBroker

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "orders.yaml"


def _run(args: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    return run_cli(args, cwd, timeout)


@pytest.mark.kafka
@pytest.mark.spark
def test_run_brings_the_example_manifest_into_a_local_table(
    kafka: KafkaBroker, tmp_path: Path
) -> None:
    topic = unique("orders")
    create_topic(kafka.bootstrap_servers, topic, partitions=3)
    produce(
        kafka.bootstrap_servers,
        topic,
        [(str(i).encode(), order(i, ["DE", "FR"][i % 2])) for i in range(2000)],
    )
    held = sum(log_end_offsets(kafka.bootstrap_servers, topic).values())
    example = example_on_topic(EXAMPLE, topic, tmp_path)

    local = tmp_path / "local"
    result = _run(
        [
            "run",
            "-f",
            str(example),
            "--bootstrap-servers",
            kafka.bootstrap_servers,
            "--local-dir",
            str(local),
            "--available-now",
            "--metrics-port",
            "0",
            "--cores",
            "2",
        ],
        cwd=tmp_path,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    table = local / "lake" / "orders"
    assert f"table:       file://{table}" in result.stdout
    assert f"holds {held} rows" in result.stdout
    rows = read_table(str(table))
    assert len(rows) == held
    assert {r["country"] for r in rows} <= {"DE", "FR", "US", "BR", "JP", "IN"}
    assert (table / "country=DE").is_dir()  # partitionBy from the manifest

    # The maintenance command the CronJob runs, on the same (local) pipeline: JSON events.
    local_manifest = yaml.safe_load(example.read_text())
    local_manifest["spec"]["sink"] = {"tablePath": f"file://{table}", "partitionBy": ["country"]}
    local_manifest["spec"]["deadLetter"] = {"tablePath": f"file://{table}_dead_letter"}
    config = tmp_path / "ingestion.yaml"
    config.write_text(yaml.safe_dump(local_manifest))
    optimized = _run(["optimize", "--config", str(config), "--master", "local[2]"], tmp_path, 600)
    assert optimized.returncode == 0, optimized.stderr[-4000:]
    events = [json.loads(line) for line in optimized.stdout.splitlines() if line.startswith("{")]
    assert [(e["event"], e["operation"]) for e in events] == [("maintenance", "optimize")] * 2
    assert events[0]["reason"] == "OptimizeCompleted"
    assert events[0]["filesRemoved"] >= events[0]["filesAdded"]
    assert events[1]["reason"] == "OptimizeSkipped"  # no dead letters, no dead-letter table
    assert len(read_table(str(table))) == held


def test_run_refuses_a_manifest_with_a_mistake_naming_the_field(tmp_path: Path) -> None:
    document = yaml.safe_load(EXAMPLE.read_text())
    document["spec"]["scaling"]["minExecutors"] = 10  # above maxExecutors: 8
    document["spec"]["source"]["startingOffset"] = "earliest"  # misspelt
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump(document))
    result = _run(["run", "-f", str(broken), "--available-now"], cwd=tmp_path, timeout=120)
    assert result.returncode == 2
    assert "spec.scaling.maxExecutors: maxExecutors must be >= minExecutors" in result.stderr
    assert "spec.source.startingOffset: unknown field" in result.stderr
    assert not (tmp_path / "deltaflow-local").exists(), "nothing may be started or written"


def test_vacuum_under_the_floor_is_refused_before_spark_starts(tmp_path: Path) -> None:
    document = yaml.safe_load(EXAMPLE.read_text())
    config = tmp_path / "ingestion.yaml"
    config.write_text(yaml.safe_dump(document))
    result = _run(
        ["vacuum", "--config", str(config), "--retention-hours", "24"], cwd=tmp_path, timeout=120
    )
    assert result.returncode == 5
    assert "allowUnsafeRetention" in result.stderr
    assert shutil.which(DELTAFLOW)
