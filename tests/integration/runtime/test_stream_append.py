"""The stream's append (``table.append_batch``, ``io.deltaflow.delta.StreamAppend``) keeps what
Delta's ``txnAppId``/``txnVersion`` write promises while reading the stream's last batch from the
table's checksum: a batch the table holds is not written again, with or without a checksum to
answer, and of two writers of one batch only one commits. Real Spark and Delta, no Kafka."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
from delta.exceptions import ConcurrentTransactionException

from deltaflow_runtime.jvm import java_frame, jvm
from deltaflow_runtime.table import append_batch, table_state

if TYPE_CHECKING:
    from pathlib import Path

    from pyspark.sql import DataFrame, SparkSession

pytestmark = [pytest.mark.spark]

APP = "deltaflow/test/orders"


def _rows(spark: SparkSession, batch: int) -> DataFrame:
    return spark.createDataFrame([(batch, i) for i in range(3)], "batch long, i long")


def _options(batch: int) -> dict[str, str]:
    return {"txnAppId": APP, "txnVersion": str(batch), "userMetadata": f"batch {batch}"}


def _start(spark: SparkSession, path: str, batch: int) -> Any:
    """A StreamAppend opened but not committed (a second writer can act in between)."""
    return jvm(spark).io.deltaflow.delta.StreamAppend.start(
        java_frame(_rows(spark, batch)), path, _options(batch), []
    )


def _batches(spark: SparkSession, path: str) -> list[tuple[int, int]]:
    rows = spark.read.format("delta").load(path).groupBy("batch").count().collect()
    return sorted((r["batch"], r["count"]) for r in rows)


def _forget_table(spark: SparkSession) -> None:
    """Drop the JVM's cached Delta logs: the next access reads the table from storage."""
    jvm(spark).org.apache.spark.sql.delta.DeltaLog.clearCache()


def test_a_batch_the_table_holds_is_not_written_again(
    runtime_spark: SparkSession, tmp_path: Path
) -> None:
    spark, path = runtime_spark, str(tmp_path / "table")
    for batch in (0, 1):
        assert append_batch(_rows(spark, batch), path, _options(batch), [])
    replay = _start(spark, path, 1)
    assert replay.fromChecksum(), "Delta's checksum of the last commit holds the stream's txn"
    assert replay.committedBatch() == 1
    assert not replay.commit()
    assert not append_batch(_rows(spark, 0), path, _options(0), [])
    assert append_batch(_rows(spark, 2), path, _options(2), [])
    assert _batches(spark, path) == [(0, 3), (1, 3), (2, 3)]
    assert table_state(spark, path, APP).stream_batch == 2
    assert table_state(spark, path, "deltaflow/test/another").stream_batch is None
    history = spark.sql(f"describe history delta.`{path}`").orderBy("version").collect()
    assert [h["userMetadata"] for h in history] == ["batch 0", "batch 1", "batch 2"]
    assert all(h["operation"] == "WRITE" for h in history)


@pytest.mark.parametrize("without", ["checksum files", "transactions in the checksum"])
def test_without_a_checksum_that_answers_delta_replays_the_log(
    runtime_spark: SparkSession, tmp_path: Path, without: str
) -> None:
    spark, path = runtime_spark, str(tmp_path / "table")
    if without == "transactions in the checksum":
        # A table that expires transaction ids: Delta then leaves them out of its checksums.
        _rows(spark, -1).limit(0).write.format("delta").option(
            "delta.setTransactionRetentionDuration", "interval 30 days"
        ).save(path)
    for batch in (0, 1):
        assert append_batch(_rows(spark, batch), path, _options(batch), [])
    if without == "checksum files":
        for crc in (tmp_path / "table" / "_delta_log").glob("*.crc"):
            crc.unlink()
    _forget_table(spark)
    replay = _start(spark, path, 1)
    assert not replay.fromChecksum()
    assert replay.committedBatch() == 1
    assert not replay.commit()
    assert append_batch(_rows(spark, 2), path, _options(2), [])
    assert _batches(spark, path) == [(0, 3), (1, 3), (2, 3)]
    if without == "checksum files":
        # That append's replay wrote a full checksum: take it away again.
        for crc in (tmp_path / "table" / "_delta_log").glob("*.crc"):
            crc.unlink()
    _forget_table(spark)
    assert not _start(spark, path, 3).fromChecksum()
    assert table_state(spark, path, APP).stream_batch == 2


def _drop_checksums(path: Path, *versions: int) -> None:
    for version in versions:
        (path / "_delta_log" / f"{version:020d}.crc").unlink()


def test_a_crash_before_the_newest_checksum_is_answered_from_an_earlier_one(
    runtime_spark: SparkSession, tmp_path: Path
) -> None:
    spark, path = runtime_spark, tmp_path / "table"
    for batch in (0, 1, 2):
        assert append_batch(_rows(spark, batch), str(path), _options(batch), [])
    # Killed after version 2's commit, before its checksum: version 1's checksum says batch 1,
    # version 2's commit says 2.
    _drop_checksums(path, 2)
    _forget_table(spark)
    replay = _start(spark, str(path), 2)
    assert replay.fromChecksum()
    assert replay.committedBatch() == 2
    assert not replay.commit()
    _forget_table(spark)
    assert table_state(spark, str(path), APP).stream_batch == 2
    # The next commit has its checksum again (later starts need no look-back).
    assert append_batch(_rows(spark, 3), str(path), _options(3), [])
    assert (path / "_delta_log" / f"{3:020d}.crc").exists()

    # A metadata change after the checksum it would start from (transaction-id retention may
    # have changed with it): only the replay answers.
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('deltaflow.note' = 'x')")  # v4
    assert append_batch(_rows(spark, 4), str(path), _options(4), [])  # v5
    _drop_checksums(path, 4, 5)
    _forget_table(spark)
    replay = _start(spark, str(path), 4)
    assert not replay.fromChecksum()
    assert replay.committedBatch() == 4
    assert not replay.commit()
    assert _batches(spark, str(path)) == [(b, 3) for b in range(5)]


def test_the_log_checkpoint_a_commit_makes_due_is_written_after_the_commit_returns(
    runtime_spark: SparkSession, tmp_path: Path
) -> None:
    spark, path = runtime_spark, tmp_path / "table"
    log = path / "_delta_log"
    _rows(spark, -1).limit(0).write.format("delta").option("delta.checkpointInterval", "3").save(
        str(path)
    )  # version 0: a checkpoint every 3 commits
    due, jobs = [], []
    context = spark.sparkContext
    for batch in range(4):  # versions 1 to 4
        append = _start(spark, str(path), batch)
        group = f"commit-{batch}-{tmp_path.name}"
        context.setJobGroup(group, group)
        try:
            assert append.commit()
        finally:
            context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        due.append(append.checkpointDue())
        jobs.append(len(context.statusTracker().getJobIdsForGroup(group)))
    # Only version 3's commit made one due, and it returned without it (a replay of the
    # table's state and a Parquet write, seconds on a small driver, not the batch's to pay):
    # its commit ran the Spark jobs of any other (Delta's commit statistics of a checkpoint
    # version would replay the state: three jobs more).
    assert due == [-1, -1, 3, -1]
    assert jobs[2] == jobs[1] == jobs[3], jobs
    assert jvm(spark).io.deltaflow.delta.StreamAppend.awaitCheckpoints(60_000)
    assert (log / f"{3:020d}.checkpoint.parquet").exists()
    assert json.loads((log / "_last_checkpoint").read_text())["version"] == 3
    # A reader starts from it: every batch once, the stream's last one known.
    _forget_table(spark)
    assert _batches(spark, str(path)) == [(b, 3) for b in range(4)]
    assert table_state(spark, str(path), APP).stream_batch == 3


def test_of_two_writers_of_one_batch_only_one_commits(
    runtime_spark: SparkSession, tmp_path: Path
) -> None:
    spark, path = runtime_spark, str(tmp_path / "table")
    assert append_batch(_rows(spark, 0), path, _options(0), [])
    first, second = _start(spark, path, 1), _start(spark, path, 1)
    assert first.fromChecksum()
    assert second.fromChecksum()
    assert first.commit()
    # (importing delta.exceptions makes PySpark raise Delta's Python class for the Java one)
    with pytest.raises(ConcurrentTransactionException, match="DELTA_CONCURRENT_TRANSACTION"):
        second.commit()
    assert _batches(spark, path) == [(0, 3), (1, 3)]
