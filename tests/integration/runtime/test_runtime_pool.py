"""A stream pool on the real Kafka and Spark: one ``deltaflow pool`` process whose members share
its JVM and stay streams of their own (exactly once each, their own failures, their own
metrics), stopped by SIGTERM as Kubernetes stops a pod."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from pool_kit import Pool, landed, start_pool
from prometheus_client.parser import text_string_to_metric_families
from runtime_kit import manifest, pipeline, unique, wait_for

from deltaflow_runtime.cost import install_pool_task_time, pool_busy_seconds
from devstack.kafka import KafkaBroker
from devstack.process import free_port

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def _fail_and_resume(pool: Pool, name: str) -> None:
    """A foreign file where member ``name``'s next Delta commit goes fails its batch: it alone
    fails and backs off, with the reason, while the others commit; once the file is gone it
    starts again by itself and lands every record."""
    log_dir = Path(pipeline(pool.docs[name]).identity.table_path) / "_delta_log"
    latest = max(int(p.stem) for p in log_dir.glob("*.json"))
    foreign = log_dir / f"{latest + 1:020d}.json"
    foreign.write_text("not a Delta commit\n")
    pool.produce(pool.docs, 300, 200)
    key = pool.key(name)
    wait_for(lambda: pool.events("member_failed", key), 120, f"{name} failed")
    failed = pool.events("member_failed", key)[0]
    assert failed["backoff"] > 0, failed  # a restart may help: it backs off, not NeedsAction
    others = [n for n in pool.docs if n != name]
    pool.wait_landed(others, 60)
    assert not [e for e in pool.events("member_failed") if e["member"] != key]
    foreign.unlink()
    pool.wait_landed([name], 180)
    assert len(pool.events("member_started", key)) >= 2


def _check_report(pool: Pool, path: Path, since: float) -> None:
    """The pool's report (in a pod, its annotation) of every member: its phase, last batch,
    lag and freshness, and the task time its batches took of the pool's threads; the invalid
    manifest by its file; the removed member (stopped before ``since``) no more."""

    def settled() -> dict[str, Any] | None:
        report = json.loads(path.read_text()) if path.exists() else {}
        if report.get("at", 0) < since:
            return None  # made before what it is checked against
        members = report.get("members", {})
        running = [members.get(pool.key(n), {}) for n in ("a", "c")]
        caught_up = all((m.get("lag") or {}).get("records") == 0 for m in running)
        # c has run long enough for its load (two report rounds); a was just restarted
        return dict(members) if caught_up and running[1].get("busyCores") else None

    # Figures alone are published at the report's 30 s heartbeat (ReportPacer): two of them.
    members: dict[str, Any] = wait_for(
        settled, 75, "a report with both members caught up and measured"
    )
    assert pool.key("b") not in members, members
    assert json.loads(path.read_text())["revision"] == "7"  # the folder's, as it acted on it
    assert members["x.yaml"]["phase"] == "Invalid", members
    for name in ("a", "c"):
        member = members[pool.key(name)]
        assert member["phase"] == "Running", member
        assert member["lastBatch"] >= 0, member
        assert member["freshness"]["targetSeconds"] > 0, member
    busy = members[pool.key("c")]["busyCores"]
    assert 0 < busy < 2, busy  # of local[2]'s two task threads
    assert members[pool.key("c")]["failures"] >= 1  # within ten minutes of its failure


def _rows_written(port: int) -> dict[str, float]:
    """``deltaflow_rows_written_total`` of each member, from the pool's metrics endpoint."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        sample.labels["stream"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "deltaflow_rows_written_total"
    }


def test_pool_members_are_streams_of_their_own_through_a_failure_removal_and_change(
    kafka: KafkaBroker, tmp_path: Path
) -> None:
    """Three members in one ``deltaflow pool`` process land their records exactly once. One
    member's batch failing puts that member alone into backoff, with the reason, while the
    others keep committing; it resumes by itself. A member removed from the folder stops and a
    changed one restarts, the others running on; an invalid manifest is reported and never
    started. Every member's series are on the pool's one metrics endpoint, labelled by stream.
    SIGTERM stops them all after their in-flight batches: exit 0, nothing lost or doubled."""
    pool = Pool(kafka.bootstrap_servers, tmp_path / "members", tmp_path / "pool.log")
    pool.folder.mkdir()
    for name in ("a", "b", "c"):
        pool.add(name, tmp_path)
    pool.produce(pool.docs, 0, 300)
    # Not a DeltaIngestion this pool can run: another namespace.
    stranger = manifest(unique("pool-x"), "x", kafka.bootstrap_servers, tmp_path)
    stranger["metadata"]["namespace"] = "elsewhere"
    (pool.folder / "x.yaml").write_text(yaml.safe_dump(stranger))

    port = free_port()
    process = start_pool(
        pool, tmp_path / "work", report=tmp_path / "report.json", metrics_port=port
    )
    try:
        pool.wait_landed(pool.docs, 180)
        [invalid] = pool.events("member_invalid")
        assert "metadata.namespace" in invalid["message"], invalid

        _fail_and_resume(pool, "c")
        written = _rows_written(port)  # c's since its restart, as a new process's would be
        assert set(written) == {pool.key(n) for n in pool.docs}, written
        assert all(rows > 0 for rows in written.values()), written

        # b removed: it stops; a changed: it restarts; c runs on through both.
        (pool.folder / "b.yaml").unlink()
        (pool.folder / "revision").write_text("7\n")  # as the operator marks each change
        pool.docs["a"]["spec"]["trigger"] = {"interval": "2s"}
        pool.write("a")
        wait_for(lambda: pool.events("member_stopped", pool.key("b")), 120, "member b stopped")
        wait_for(
            lambda: len(pool.events("member_started", pool.key("a"))) >= 2,
            120,
            "member a restarted on its new spec",
        )
        pool.produce(pool.docs, 500, 100)
        pool.wait_landed(["a", "c"], 120)
        _check_report(pool, tmp_path / "report.json", since=time.time())
        assert process.terminate(timeout=120) == 0, pool.log.read_text()[-3000:]
    finally:
        if process.alive():
            process.kill()
    # Every record exactly once; b's last ones unread (it was removed before them).
    for name in ("a", "c"):
        assert {s.tpo for s in pool.sent[name]} == landed(pool.docs[name])
    assert {s.tpo for s in pool.sent["b"][:500]} == landed(pool.docs["b"])
    assert not pool.events("member_failed", pool.key("a"))
    assert not pool.events("member_failed", pool.key("b"))


def test_task_time_is_counted_to_the_scheduler_pool_its_job_ran_in(
    runtime_spark: SparkSession,
) -> None:
    """A pool places its members by the task time their batches take of its threads: the JVM
    listener counts each job's tasks to the scheduler pool the job ran in (the member's), and
    nothing to another."""
    assert install_pool_task_time(runtime_spark)
    busy, idle = unique("test/busy"), unique("test/idle")
    context = runtime_spark.sparkContext
    context.setLocalProperty("spark.scheduler.pool", busy)
    try:
        runtime_spark.range(0, 3_000_000, numPartitions=4).selectExpr("sum(id * id)").collect()
    finally:
        context.setLocalProperty("spark.scheduler.pool", None)  # type: ignore[arg-type]
    counted = wait_for(
        lambda: (pool_busy_seconds(runtime_spark) or {}).get(busy),
        10,
        "the job's task time counted",
    )
    assert 0 < counted < 60
    readings = pool_busy_seconds(runtime_spark)
    assert readings is not None
    assert readings[busy] == counted  # several pools, one call: each its own
    assert idle not in readings
