"""Drain throughput: records per CPU-second, Deltaflow runtime vs a minimal hand-written job.

Produces N ~300-byte JSON records once, then lets each job drain the same topic from the start
(availableNow, same manifest, same Spark settings, local[2]) into its own table, alternating the
order when repeated. CPU is the whole process tree (Python driver + Spark JVM), from /proc.

    bash bench/run.sh throughput [--records 5000000] [--repeat 1]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from common import Run, baseline_job, broker, create_topic, deltaflow_job, produce, write_manifest


def _rows(table: Path) -> int:
    from deltalake import DeltaTable

    return int(DeltaTable(str(table)).count())


def main() -> int:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--max-offsets", type=int, default=500_000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="deltaflow-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    kafka = broker(work)
    results: list[tuple[str, Run, int]] = []
    try:
        create_topic(kafka.bootstrap_servers, "bench", args.partitions)
        seconds = produce(kafka.bootstrap_servers, "bench", args.records)
        print(f"produced {args.records} records (~300 B) in {seconds:.1f}s", flush=True)
        for rep in range(args.repeat):
            order = ("baseline", "deltaflow") if rep % 2 == 0 else ("deltaflow", "baseline")
            for job in order:
                name = f"tp-{job}-{rep}"
                config = work / f"{name}.yaml"
                table, _ = write_manifest(
                    config,
                    name,
                    "bench",
                    kafka.bootstrap_servers,
                    work,
                    max_offsets=args.max_offsets,
                    trigger="1s",
                )
                log = work / f"{name}.log"
                start = baseline_job if job == "baseline" else deltaflow_job
                run = start(config, work, log, available_now=True).wait(timeout=7200)
                if run.code != 0:
                    raise SystemExit(f"{job} exited {run.code}: see {log}")
                out = table.parent / (table.name + "_baseline") if job == "baseline" else table
                rows = _rows(out)
                results.append((job, run, rows))
                print(
                    f"{job:9s} run {rep}: {rows} rows, wall {run.wall:6.1f}s, cpu {run.cpu:6.1f}s, "
                    f"{rows / run.cpu:9.0f} records/cpu-s, {rows / run.wall:9.0f} records/s",
                    flush=True,
                )
                time.sleep(2)
    finally:
        kafka.stop()
    per_job: dict[str, list[float]] = {}
    for job, run, rows in results:
        if rows != args.records:
            raise SystemExit(f"{job} wrote {rows} rows, expected {args.records}")
        per_job.setdefault(job, []).append(rows / run.cpu)
    base = sum(per_job["baseline"]) / len(per_job["baseline"])
    ours = sum(per_job["deltaflow"]) / len(per_job["deltaflow"])
    print("\n== drain throughput (records per CPU-second, mean of runs)")
    print(f"baseline  {base:10.0f}")
    print(f"deltaflow {ours:10.0f}")
    print(
        f"ratio deltaflow/baseline {ours / base:.3f}  -> overhead {100 * (base / ours - 1):+.1f}%"
    )
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
