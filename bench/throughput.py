"""Drain throughput: records per CPU-second, Deltaflow runtime vs a minimal hand-written job.

Produces N ~300-byte JSON records once, then lets each job drain the same topic from the start
(availableNow, same manifest, same Spark settings, local[2]) into its own table, rotating the
order when repeated. CPU is the whole process tree (Python driver + Spark JVM), from /proc.

Three jobs: ``baseline`` (the minimal hand-written job: from_json, no checks), ``validated`` (the
same job plus the runtime's per-record validity checks) and ``deltaflow`` (the runtime). The
ratio deltaflow/baseline is the issue's figure; validated/baseline is what the per-record checks
cost by themselves, deltaflow/validated what the rest of the runtime costs (exactly-once writes,
dead-letter table, guards, consumer-group commits, metrics).

Two figures per job: the whole run (start-up included: JVM, Spark session, the runtime's start-up
guards), and the steady state: the CPU from the moment the first batch's commit appears in the
table's log to the exit, over the records after the first batch (``--max-offsets`` each). The
steady state is what a stream that runs for days pays per record; it needs at least two batches.

    bash bench/run.sh throughput [--records 5000000] [--repeat 1] [--object-store]
                                 [--bad-percent 0.2]

``--object-store`` puts every job's tables and checkpoints on a MinIO server (s3a://, started by
the benchmark on loopback) instead of the local disk: the same jobs, the same ratios.
"""

from __future__ import annotations

import argparse
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from common import (
    Job,
    Lake,
    Run,
    bad_count,
    baseline_job,
    broker,
    create_topic,
    deltaflow_job,
    lake,
    produce,
    work_dir,
    write_manifest,
)


def _rows(table: str, where: Lake) -> int:
    from deltalake import DeltaTable

    return int(DeltaTable(table, storage_options=where.options).count())


@dataclass
class Drain:
    """One job's drain: its run, the rows in its table, and its CPU seconds when its first
    batch's commit appeared (None if it never did while it ran)."""

    run: Run
    rows: int
    cpu_at_first_commit: float | None


def _first_data_commit(table: str, where: Lake, job: Job, done: threading.Event) -> float | None:
    """Poll the table's log until a commit that adds data files appears; the job's CPU then."""
    from pyarrow import fs

    files, log = where.locate(table + "/_delta_log")
    seen: set[str] = set()
    while not done.is_set():
        try:
            infos = files.get_file_info(fs.FileSelector(log))
        except OSError:
            infos = []
        for info in sorted(infos, key=lambda i: i.path):
            if not info.path.endswith(".json") or info.path in seen:
                continue
            seen.add(info.path)
            with files.open_input_stream(info.path) as stream:
                if b'"add"' in stream.read():
                    return job.cpu.current()
        time.sleep(0.05)
    return None


def _steady(drained: Drain, records: int) -> float | None:
    """Records per CPU-second after the first batch's commit (None: not measurable)."""
    if drained.cpu_at_first_commit is None or records <= 0:
        return None
    spent = drained.run.cpu - drained.cpu_at_first_commit
    return records / spent if spent > 0 else None


def _fmt(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def _drain(
    job: str, name: str, *, work: Path, bootstrap: str, where: Lake, args: argparse.Namespace
) -> Drain:
    """One job drains the topic into its own table."""
    config = work / f"{name}.yaml"
    table = write_manifest(
        config,
        name,
        "bench",
        bootstrap,
        where,
        max_offsets=args.max_offsets,
        trigger="1s",
        optimize_write=args.optimize_write == "on",
        spark_conf=dict(c.split("=", 1) for c in args.spark_conf),
    )
    log = work / f"{name}.log"
    if job == "deltaflow":
        started = deltaflow_job(config, work, log, available_now=True, env=where.env)
    else:
        validate = job == "validated"
        started = baseline_job(
            config, work, log, available_now=True, validate=validate, env=where.env
        )
    path = table if job == "deltaflow" else table + "_baseline"
    done = threading.Event()
    with ThreadPoolExecutor(max_workers=1) as watcher:
        first = watcher.submit(_first_data_commit, path, where, started, done)
        run = started.wait(timeout=7200)
        done.set()
    if run.code != 0:
        raise SystemExit(f"{job} exited {run.code}: see {log}")
    return Drain(run, _rows(path, where), first.result())


def _report(
    whole: dict[str, list[float]],
    steady: dict[str, list[float]],
    jobs: tuple[str, ...],
    args: argparse.Namespace,
    *,
    where: Lake,
    steady_records: int,
) -> None:
    """Print the means of the runs and the ratios between the jobs."""
    print(
        "\n== drain throughput (records per CPU-second, mean of runs), "
        f"tables on the {where.kind}, {args.bad_percent}% bad records"
    )
    for title, figures in (
        ("whole run (start-up included)", whole),
        (f"steady state (after the first batch: {steady_records} records)", steady),
    ):
        if any(len(figures.get(j, [])) != args.repeat for j in jobs):
            print(f"-- {title}: not measured for every run")
            continue
        mean = {job: sum(v) / len(v) for job, v in figures.items()}
        print(f"-- {title}")
        for job, value in mean.items():
            print(f"{job:9s} {value:10.0f}")
        for a, b in (
            ("deltaflow", "baseline"),
            ("validated", "baseline"),
            ("deltaflow", "validated"),
        ):
            if a not in mean or b not in mean:
                continue
            print(
                f"ratio {a}/{b} {mean[a] / mean[b]:.3f}  -> CPU per record "
                f"{100 * (mean[b] / mean[a] - 1):+.1f}%"
            )


def main() -> int:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--max-offsets", type=int, default=500_000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--object-store", action="store_true", help="tables on MinIO (s3a://)")
    parser.add_argument(
        "--optimize-write",
        choices=("on", "off"),
        default="off",
        help="the runtime's sink.optimizeWrite (the minimal jobs write without it)",
    )
    parser.add_argument(
        "--bad-percent",
        type=float,
        default=0.0,
        help="percent of bad records (truncated, schema mismatch, trailing data), e.g. 0.2 or 5",
    )
    parser.add_argument(
        "--jobs",
        default="baseline,validated,deltaflow",
        help="which jobs to run, comma-separated (ratios need the pairs they compare)",
    )
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="into the manifest's spec.sparkConf, for every job (e.g. to pin a setting the "
        "runtime otherwise chooses, as an A/B)",
    )
    args = parser.parse_args()
    work = work_dir(args.work, "deltaflow-bench-")
    kafka = broker(work)
    where = lake(work, args.object_store)
    print(f"tables on the {where.kind}", flush=True)
    results: list[tuple[str, Drain]] = []
    steady_records = args.records - min(args.records, args.max_offsets)
    try:
        create_topic(kafka.bootstrap_servers, "bench", args.partitions)
        seconds = produce(
            kafka.bootstrap_servers, "bench", args.records, bad_percent=args.bad_percent
        )
        bad = bad_count(args.records, args.bad_percent)
        print(
            f"produced {args.records} records (~300 B, {bad} of them bad) in {seconds:.1f}s",
            flush=True,
        )
        chosen = args.jobs.split(",")
        jobs = tuple(j for j in ("baseline", "validated", "deltaflow") if j in chosen)
        for rep in range(args.repeat):
            order = jobs[rep % len(jobs) :] + jobs[: rep % len(jobs)]
            for job in order:
                drained = _drain(
                    job,
                    f"tp-{job}-{rep}",
                    work=work,
                    bootstrap=kafka.bootstrap_servers,
                    where=where,
                    args=args,
                )
                results.append((job, drained))
                run = drained.run
                print(
                    f"{job:9s} run {rep}: {drained.rows} rows, wall {run.wall:6.1f}s, "
                    f"cpu {run.cpu:6.1f}s (python {run.python_cpu:4.1f}s, "
                    f"{_fmt(drained.cpu_at_first_commit)}s to the first commit), "
                    f"{args.records / run.cpu:9.0f} records/cpu-s, "
                    f"steady {_fmt(_steady(drained, steady_records), '9.0f')} records/cpu-s, "
                    f"{args.records / run.wall:9.0f} records/s",
                    flush=True,
                )
                time.sleep(2)
    finally:
        kafka.stop()
        where.stop()
    whole: dict[str, list[float]] = {}
    steady: dict[str, list[float]] = {}
    for job, drained in results:
        # The minimal job lands bad records as rows of nulls; the others refuse them.
        expected = args.records if job == "baseline" else args.records - bad
        if drained.rows != expected:
            raise SystemExit(f"{job} wrote {drained.rows} rows, expected {expected}")
        whole.setdefault(job, []).append(args.records / drained.run.cpu)
        rate = _steady(drained, steady_records)
        if rate is not None:
            steady.setdefault(job, []).append(rate)
    _report(whole, steady, jobs, args, where=where, steady_records=steady_records)
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
