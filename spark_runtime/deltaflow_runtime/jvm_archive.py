"""A class-data-sharing (AppCDS) archive of the classes a driver loads, so a driver starts faster.

A driver's JVM spends seconds of its start loading and verifying Spark's, Hadoop's and Delta's
classes; a recovery, a replacement and every local run pay it again. Java 17 maps the classes a
training run loaded from an archive instead (``-XX:SharedArchiveFile``). The archive is built by
``deltaflow jvm-archive`` (``stack/install/jvm-archive.sh`` builds one for local runs)
and is only a cache: a JVM whose class path or jars differ from the training run's says so in one
warning line and loads its classes the usual way (``-Xshare:auto``, Java's default).

Measured on 2 cores (a local driver of the crash soak, spawn to first commit, 3 starts each):
21.3 s -> 16.9 s.

The image builds one (the Dockerfile) and names it in ``DELTAFLOW_JVM_ARCHIVE``. Java archives no
class path holding a non-empty directory, so the driver pod's spark-defaults.conf is read by the
runtime (``DELTAFLOW_SPARK_DEFAULTS``) rather than handed to spark-submit as ``SPARK_CONF_DIR``,
which would put its folder on the class path.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from deltaflow_runtime.jvm import jvm, stop_jvm
from deltaflow_runtime.session import DRIVER_JAVA_OPTIONS

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ENV_JVM_ARCHIVE = "DELTAFLOW_JVM_ARCHIVE"
ARCHIVE_NAME = "deltaflow.jsa"


def find_archive(env: Mapping[str, str], cache_dir: Path) -> Path | None:
    """The archive a driver uses: ``DELTAFLOW_JVM_ARCHIVE`` (empty: none), else the newest the
    stack built into the cache (``<cache>/jvm-archive/<key>/deltaflow.jsa``); None if there is
    no such file."""
    named = env.get(ENV_JVM_ARCHIVE)
    if named is not None:
        return Path(named) if named and Path(named).is_file() else None
    built = [
        p
        for p in (cache_dir / "jvm-archive").glob(f"*/{ARCHIVE_NAME}")
        if p.is_file() and (p.parent / ".complete").exists()  # not one still being built
    ]
    return max(built, key=lambda p: p.stat().st_mtime, default=None)


def with_archive(conf: Mapping[str, str], archive: Path | None) -> dict[str, str]:
    """``conf`` with the driver JVM mapping ``archive`` (the driver's other Java options kept;
    an archive the options already name is left as it is)."""
    out = dict(conf)
    options = out.get(DRIVER_JAVA_OPTIONS, "")
    if archive is None or "SharedArchiveFile" in options or "ArchiveClassesAtExit" in options:
        return out
    out[DRIVER_JAVA_OPTIONS] = f"{options} -XX:SharedArchiveFile={archive}".strip()
    return out


def build_archive(output: Path, conf: Mapping[str, str], work: Path) -> float:
    """Run a training workload in a fresh driver JVM (a Delta table written under ``work``, read
    back and its stream transaction looked up, the Kafka source resolved) and write the classes
    it loaded to ``output``; returns the seconds it took. Must run in a process whose JVM is not
    started."""
    from deltaflow_runtime.session import build_session

    started = time.monotonic()
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(output.name + ".partial")
    partial.unlink(missing_ok=True)
    options = conf.get(DRIVER_JAVA_OPTIONS, "")
    # Its warnings name every class it cannot archive (generated ones): noise, not news.
    dump = f"-XX:ArchiveClassesAtExit={partial} -Xlog:cds=off -Xlog:cds+dynamic=off"
    training = {**conf, DRIVER_JAVA_OPTIONS: f"{options} {dump}"}
    table = work / "training-table"
    try:
        spark = build_session(training)
        _train(spark, str(table))
        spark.stop()
        stop_jvm(timeout=300)  # the JVM writes the archive as it exits
    finally:
        shutil.rmtree(table, ignore_errors=True)
    if not partial.is_file():
        raise RuntimeError(
            f"the JVM wrote no archive to {partial}: is a non-empty directory on its class path "
            "(SPARK_CONF_DIR)?"
        )
    os.replace(partial, output)
    return time.monotonic() - started


def _train(spark: SparkSession, table: str) -> None:
    """What a driver's start and first batches load: Delta commits with a stream transaction
    and user metadata, a partitioned append, the log replay that finds the transaction, a read
    back, JSON parsing, and the Kafka source's planning (no broker is contacted)."""
    from pyspark.sql import functions as F  # noqa: N812

    from deltaflow_runtime.table import append_batch, known_files, table_state

    frame = spark.createDataFrame(
        [(i, f'{{"id": {i}, "country": "{"DE" if i % 2 else "FR"}"}}') for i in range(200)],
        "offset BIGINT, value STRING",
    )
    parsed = frame.select(
        "offset",
        F.from_json("value", "id BIGINT, country STRING").alias("record"),
    ).select("offset", "record.*")
    for batch in range(3):
        # The runtime's own append (table.append_batch), as the sink writes every batch.
        append_batch(
            parsed,
            table,
            {
                "txnAppId": "deltaflow/training",
                "txnVersion": str(batch),
                "userMetadata": json.dumps({"deltaflow": {"batchId": batch}}),
                "mergeSchema": "true",
            },
            ["country"],
        )
    jvm(spark).org.apache.spark.sql.delta.DeltaLog.clearCache()
    known_files(spark, table)
    table_state(spark, table, "deltaflow/training", sized=True)
    spark.read.format("delta").load(table).groupBy("country").count().collect()
    (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", "127.0.0.1:9")
        .option("subscribe", "training")
        .load()
        .selectExpr("CAST(value AS STRING)")
    )
