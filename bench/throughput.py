"""Drain throughput: records per CPU-second, Deltaflow runtime vs a minimal hand-written job.

Produces N ~300-byte JSON records once, then lets each job drain the same topic from the start
(availableNow, same manifest, same Spark settings, local[2]) into its own table, rotating the
order when repeated. CPU is the whole process tree (Python driver + Spark JVM), from /proc.

Three jobs: ``baseline`` (the minimal hand-written job: from_json, no checks), ``validated`` (the
same job plus the runtime's per-record validity checks) and ``deltaflow`` (the runtime). The
ratio deltaflow/baseline is the issue's figure; validated/baseline is what the per-record checks
cost by themselves, deltaflow/validated what the rest of the runtime costs (exactly-once writes,
dead-letter table, guards, consumer-group commits, metrics).

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
        jobs = ("baseline", "validated", "deltaflow")
        for rep in range(args.repeat):
            order = jobs[rep % 3 :] + jobs[: rep % 3]
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
                if job == "deltaflow":
                    started = deltaflow_job(config, work, log, available_now=True)
                else:
                    validate = job == "validated"
                    started = baseline_job(config, work, log, available_now=True, validate=validate)
                run = started.wait(timeout=7200)
                if run.code != 0:
                    raise SystemExit(f"{job} exited {run.code}: see {log}")
                out = table if job == "deltaflow" else table.parent / (table.name + "_baseline")
                rows = _rows(out)
                results.append((job, run, rows))
                print(
                    f"{job:9s} run {rep}: {rows} rows, wall {run.wall:6.1f}s, cpu {run.cpu:6.1f}s "
                    f"(python {run.python_cpu:4.1f}s), "
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
    mean = {job: sum(v) / len(v) for job, v in per_job.items()}
    print("\n== drain throughput (records per CPU-second, mean of runs)")
    for job in jobs:
        print(f"{job:9s} {mean[job]:10.0f}")
    for a, b in (("deltaflow", "baseline"), ("validated", "baseline"), ("deltaflow", "validated")):
        print(
            f"ratio {a}/{b} {mean[a] / mean[b]:.3f}  -> CPU per record "
            f"{100 * (mean[b] / mean[a] - 1):+.1f}%"
        )
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
