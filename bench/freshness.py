"""Freshness and file count at a fixed produce rate.

Runs ``deltaflow stream`` (processing-time trigger), produces at a fixed rate for a while, drains,
then reads the table's own log: for every row, (commit time of the Delta version that added it -
its Kafka produce timestamp) / trigger interval; and data files per million records. The records
of the first ``--warmup-seconds`` meet a cold JVM (the first batch with data takes several
triggers): p50/p99 leave them out, and their p99 is printed apart.

    bash bench/run.sh freshness [--rate 5000] [--seconds 120] [--warmup-seconds 30] [--trigger 5s]
                                [--object-store] [--optimize-write on|off|both]
                                [--jobs deltaflow,baseline]

``--jobs ...,baseline`` also runs the minimal hand-written job (bench/baseline_job.py: Delta's own
streaming sink, no checks) at the same rate and trigger: what this machine gives any Spark job.

``--object-store``: the table and the checkpoint on a MinIO server (s3a://) the benchmark starts.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from common import (
    Job,
    Lake,
    Run,
    baseline_job,
    broker,
    create_topic,
    deltaflow_job,
    lake,
    percentile,
    produce,
    work_dir,
    write_manifest,
)

from deltaflow_api.v1alpha1 import duration_seconds
from deltaflow_runtime.config import Pipeline, load_ingestion


def commits(table: str, where: Lake) -> list[tuple[int, float, list[str]]]:
    """(version, commit time in s, added data files) of every stream commit."""
    from pyarrow import fs

    files, base = where.locate(table + "/_delta_log")
    logs = sorted(
        i.path for i in files.get_file_info(fs.FileSelector(base)) if i.path.endswith(".json")
    )
    out = []
    for log in logs:
        info: dict[str, object] = {}
        added = []
        with files.open_input_stream(log) as stream:
            text = stream.read().decode()
        for line in text.splitlines():
            action = json.loads(line)
            if "commitInfo" in action:
                info = action["commitInfo"]
            elif "add" in action and action["add"].get("dataChange", True):
                added.append(action["add"]["path"])
        # WRITE: the runtime's appends; STREAMING UPDATE: Delta's streaming sink (minimal job).
        if info.get("operation") in ("WRITE", "STREAMING UPDATE"):
            name = log.rsplit("/", 1)[-1]
            out.append((int(name[:20]), float(info["timestamp"]) / 1000, added))  # type: ignore[arg-type]
    return out


def latencies(table: str, where: Lake) -> tuple[list[tuple[float, float]], int, int]:
    """Per-row (produce time, commit - produce) in seconds, rows, data files."""
    import urllib.parse

    import pyarrow as pa
    import pyarrow.parquet as pq

    values: list[tuple[float, float]] = []
    files = 0
    store, base = where.locate(table)
    for _, committed, added in commits(table, where):
        for rel in added:
            files += 1
            column = pq.read_table(
                f"{base}/{urllib.parse.unquote(rel)}",
                columns=["_kafka_timestamp"],
                filesystem=store,
            )
            # Spark may write INT96 (read back as ns) or INT64 micros: normalise to micros.
            micros = column.column(0).cast(pa.timestamp("us", tz="UTC"), safe=False)
            stamps = micros.cast(pa.int64()).to_pylist()
            values.extend((s / 1e6, committed - s / 1e6) for s in stamps)
    return values, len(values), files


def _wait_rows(table: str, where: Lake, total: int, timeout: float) -> None:
    """Until the table holds ``total`` rows (or ``timeout``)."""
    from deltalake import DeltaTable

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if DeltaTable(table, storage_options=where.options).count() >= total:
                return
        except Exception:  # no table yet
            pass
        time.sleep(1)


def _started(job: Job, log: Path, checkpoint: str | None, where: Lake) -> bool:
    """Whether the stream runs: the runtime logs it; the minimal job has written its
    checkpoint's metadata."""
    if checkpoint is None:
        return '"stream_starting"' in log.read_text(errors="replace")
    from pyarrow import fs

    files, path = where.locate(checkpoint + "/metadata")
    return bool(files.get_file_info(path).type == fs.FileType.File)


def _run(
    args: argparse.Namespace,
    work: Path,
    bootstrap: str,
    where: Lake,
    optimize_write: bool,
    *,
    baseline: bool = False,
) -> dict[str, float]:
    """One stream at the given rate with optimized writes on or off (or the minimal job): its
    figures."""
    name = "fresh-baseline" if baseline else f"fresh-{'ow' if optimize_write else 'plain'}"
    interval = duration_seconds(args.trigger)
    create_topic(bootstrap, name, args.partitions)
    config = work / f"{name}.yaml"
    table = write_manifest(
        config,
        name,
        name,
        bootstrap,
        where,
        max_offsets=10_000_000,
        trigger=args.trigger,
        optimize_write=optimize_write,
    )
    log = work / f"{name}.log"
    checkpoint = None
    if baseline:
        table += "_baseline"
        checkpoint = Pipeline.of(load_ingestion(config)).identity.checkpoint_path + "_baseline"
        job = baseline_job(config, work, log, available_now=False, env=where.env)
    else:
        job = deltaflow_job(config, work, log, available_now=False, env=where.env)
    deadline = time.monotonic() + 300
    while not _started(job, log, checkpoint, where):
        if time.monotonic() > deadline or job.proc.poll() is not None:
            raise SystemExit(f"the stream did not start: see {log}")
        time.sleep(0.5)
    time.sleep(2 * interval)  # past the first (empty) triggers
    total = int(args.rate * (args.warmup_seconds + args.seconds))
    took = produce(bootstrap, name, total, rate=args.rate)
    print(f"[{name}] produced {total} records at {total / took:.0f}/s over {took:.0f}s", flush=True)
    _wait_rows(table, where, total, 300)
    if baseline:
        cpu = job.cpu.current()
        job.kill()  # the minimal job has no graceful stop; its table is complete
        run = Run(0, time.monotonic() - job.started, cpu)
    else:
        run = job.stop()
    print(
        f"[{name}] driver stopped (exit {run.code}); cpu {run.cpu:.1f}s over {run.wall:.0f}s",
        flush=True,
    )
    produced, rows, files = latencies(table, where)
    if rows != total:
        raise SystemExit(f"the table holds {rows} rows, produced {total}")
    # The first records after the start meet a cold JVM (class loading, JIT): the first batch
    # with data takes several triggers. Measured apart, as a restart's cost, not the stream's.
    cut = min(t for t, _ in produced) + args.warmup_seconds
    values = [v for t, v in produced if t >= cut]
    everything = [v for _, v in produced]
    ratios = [v / interval for v in values]
    return {
        "commits": len(commits(table, where)),
        "p50": percentile(ratios, 50),
        "p99": percentile(ratios, 99),
        "p50s": percentile(values, 50),
        "p99s": percentile(values, 99),
        "p99_all": percentile(everything, 99) / interval,
        "max": max(ratios),
        "files_per_million": files / rows * 1e6,
        "files": files,
        "rows": rows,
        "cpu_per_million": run.cpu / rows * 1e6,
    }


def main() -> int:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=float, default=5000)
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument(
        "--warmup-seconds",
        type=float,
        default=30,
        help="produced first at the same rate and left out of p50/p99 (reported apart)",
    )
    parser.add_argument("--trigger", default="5s")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--object-store", action="store_true", help="the table on MinIO (s3a://)")
    parser.add_argument(
        "--jobs",
        default="deltaflow",
        help="deltaflow, baseline (the minimal hand-written job) or both, comma-separated",
    )
    parser.add_argument(
        "--optimize-write",
        choices=("on", "off", "both"),
        default="both",
        help="sink.optimizeWrite; both: off (the baseline) then on, same broker and rate",
    )
    args = parser.parse_args()
    work = work_dir(args.work, "deltaflow-fresh-")
    kafka = broker(work)
    where = lake(work, args.object_store)
    modes = {"on": [True], "off": [False], "both": [False, True]}[args.optimize_write]
    jobs = args.jobs.split(",")
    results: dict[bool, dict[str, float]] = {}
    minimal: dict[str, float] | None = None
    try:
        if "deltaflow" in jobs:
            for mode in modes:
                results[mode] = _run(args, work, kafka.bootstrap_servers, where, mode)
        if "baseline" in jobs:
            minimal = _run(args, work, kafka.bootstrap_servers, where, False, baseline=True)
    finally:
        kafka.stop()
        where.stop()
    print(
        f"\n== freshness at {args.rate:.0f} records/s for {args.seconds:.0f}s after a "
        f"{args.warmup_seconds:.0f}s warm-up, trigger "
        f"{args.trigger}, {args.partitions} Kafka partitions x 4 table partitions, table on the "
        f"{where.kind}"
    )
    rows = [(f"optimizeWrite {'on ' if mode else 'off'}", r) for mode, r in results.items()]
    if minimal is not None:
        rows.append(("minimal job      ", minimal))
    for title, r in rows:
        print(
            f"{title}: (commit - produce) / trigger p50 "
            f"{r['p50']:.2f}, p99 {r['p99']:.2f}, max {r['max']:.2f} (p50 {r['p50s']:.2f}s, p99 "
            f"{r['p99s']:.2f}s; p99 with the warm-up {r['p99_all']:.2f}); "
            f"{r['files_per_million']:.0f} data files per million records ({r['files']:.0f} "
            f"files, {r['commits']:.0f} commits); {r['cpu_per_million']:.0f} CPU-s per million"
        )
    if len(results) == 2:
        off, on = results[False], results[True]
        cpu = on["cpu_per_million"] / off["cpu_per_million"]
        print(
            f"ratio on/off: files {on['files'] / off['files']:.2f}x, p99 freshness "
            f"{on['p99'] / off['p99']:.2f}x, CPU per record {cpu:.2f}x"
        )
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
