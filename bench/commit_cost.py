"""What one small Delta commit costs, with and without a transaction id, by the number of tasks
Delta's state reconstruction runs in (``spark.databricks.delta.snapshotPartitions``).

Every batch of a stream commits with ``txnAppId``/``txnVersion`` (the runtime, and Delta's own
streaming sink alike), and delta-spark 4.4 answers the stream's last ``txnVersion`` by
reconstructing the whole table state (a Spark job over ``snapshotPartitions`` tasks), not from the
``.crc`` file. This fixed cost is paid per batch, whatever its size. The runtime's own append
(``table.append_batch``, kind "append") reads it from the ``.crc`` instead: it is measured
beside Delta's write with (kind "txn") and without (kind "plain") a transaction id.

For each table size in ``--files`` a table is made with that many files in its log (synthetic
``add`` actions in 20k-file commits, then a checkpoint, then a few real commits, as a stream's
table looks between checkpoints). Then, in one warm JVM (local[2], the runtime's Delta settings),
``--commits`` appends of 4 rows each, for each setting in ``--partitions`` and for the runtime's
own choice (``table.snapshot_partitions``), in ``--repeat`` rotations (JIT warming favours
whatever runs later; rotating spreads it). Printed: CPU-s and wall seconds per commit (mean over
rotations), and each against the runtime's former fixed 8 tasks.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from common import local_session

SYNTHETIC_PER_COMMIT = 20_000


def _jvm_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _synthetic_log(spark: Any, path: Path, files: int) -> None:
    """A partitioned table whose log holds ``files`` more files than the data written (Delta's
    state reconstruction reads the log, never those files)."""
    from pyspark.sql import functions as F  # noqa: N812

    rows = spark.range(4).select("id", F.lit("DE").alias("country"))
    rows.write.format("delta").partitionBy("country").save(str(path))
    log = path / "_delta_log"
    for version, start in enumerate(range(0, files, SYNTHETIC_PER_COMMIT), start=1):
        lines = [json.dumps({"commitInfo": {"timestamp": int(time.time() * 1000)}})]
        for i in range(start, min(files, start + SYNTHETIC_PER_COMMIT)):
            add = {
                "path": f"country=DE/part-{i:08d}.parquet",
                "partitionValues": {"country": "DE"},
                "size": 1000,
                "modificationTime": 1,
                "dataChange": True,
                "stats": '{"numRecords":4}',
            }
            lines.append(json.dumps({"add": add}))
        (log / f"{version:020d}.json").write_text("\n".join(lines) + "\n")
    jvm = spark.sparkContext._jvm
    delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, str(path))
    delta_log.update(False, jvm.scala.Option.empty(), jvm.scala.Option.empty())
    delta_log.checkpoint()


Runs = dict[tuple[str, int], list[tuple[float, float]]]


def _report(files: int, chosen: int, runs: Runs) -> None:
    """Mean CPU-s and seconds per commit for each (kind, tasks), txn commits against 8 tasks."""
    print(f"\n{files:,} files in the log (runtime's choice: {chosen} tasks)", flush=True)

    def mean(samples: list[tuple[float, float]], at: int) -> float:
        return sum(s[at] for s in samples) / len(samples)

    base = runs.get(("txn", 8))
    for (kind, partitions), samples in sorted(runs.items()):
        cpu, wall = mean(samples, 0), mean(samples, 1)
        line = f"  {kind:5s} {partitions:2d} tasks: {cpu:5.2f} CPU-s {wall:5.2f} s a commit"
        if base is not None and kind in ("txn", "append"):
            line += f"  ({cpu / mean(base, 0):.2f}x the CPU of 8 tasks)"
        if partitions == chosen and kind == "append":
            line += "  <- runtime"
        print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", default="0,10000,50000,200000", help="table sizes")
    parser.add_argument("--partitions", default="1,2,8", help="snapshotPartitions to compare")
    parser.add_argument("--commits", type=int, default=10, help="per setting and rotation")
    parser.add_argument("--repeat", type=int, default=2, help="rotations")
    args = parser.parse_args()

    from pyspark.sql import functions as F  # noqa: N812

    from deltaflow_runtime.session import DEFAULT_CONF, PINNED_CONF
    from deltaflow_runtime.table import (
        SNAPSHOT_PARTITIONS,
        append_batch,
        known_files,
        snapshot_partitions,
    )

    spark = local_session(2, {**DEFAULT_CONF, **PINNED_CONF})
    jvm: Any = spark.sparkContext._jvm
    pid = int(jvm.java.lang.ProcessHandle.current().pid())
    rows = spark.range(4).select("id", F.lit("DE").alias("country"))
    work = Path(tempfile.mkdtemp(prefix="deltaflow-commit-cost-"))
    version = 0

    def commits(path: Path, partitions: int, kind: str) -> tuple[float, float]:
        nonlocal version
        spark.conf.set(SNAPSHOT_PARTITIONS, str(partitions))
        cpu, wall = _jvm_cpu(pid), time.perf_counter()
        for _ in range(args.commits):
            version += 1
            if kind == "append":
                options = {"txnAppId": "bench-append", "txnVersion": str(version)}
                append_batch(rows, str(path), options, ["country"])
                continue
            writer = rows.write.format("delta").mode("append").partitionBy("country")
            if kind == "txn":
                writer = writer.option("txnAppId", "bench").option("txnVersion", str(version))
            writer.save(str(path))
        return (_jvm_cpu(pid) - cpu) / args.commits, (time.perf_counter() - wall) / args.commits

    try:
        for files in (int(f) for f in args.files.split(",")):
            path = work / f"table-{files}"
            _synthetic_log(spark, path, files)
            commits(path, 8, "txn")  # warm-up: the JIT, and the table's first snapshot
            chosen = snapshot_partitions(known_files(spark, str(path)))
            settings = sorted({*(int(p) for p in args.partitions.split(",")), chosen})
            runs: Runs = {}
            for rotation in range(args.repeat):
                order = settings if rotation % 2 == 0 else settings[::-1]
                for partitions in order:
                    for kind in ("txn", "plain", "append"):
                        runs.setdefault((kind, partitions), []).append(
                            commits(path, partitions, kind)
                        )
            _report(files, chosen, runs)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
