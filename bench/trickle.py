"""Fixed cost per batch at a trickle (10 records/s): CPU-seconds and wall time per micro-batch,
Deltaflow runtime vs the minimal hand-written job, same manifest and Spark settings.

    bash bench/run.sh trickle [--rate 10] [--seconds 120] [--trigger 1s]
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from common import (
    Lake,
    baseline_job,
    broker,
    create_topic,
    deltaflow_job,
    percentile,
    produce,
    work_dir,
    write_manifest,
)


def _versions(table: Path) -> int:
    log = table / "_delta_log"
    return len(list(log.glob("*.json"))) if log.exists() else 0


def _batch_phases(log: Path) -> dict[str, list[float]]:
    """Seconds per phase of each non-empty batch: Spark's durationMs (triggerExecution,
    addBatch, walCommit, ...) and the runtime's own (sink.prepare, sink.write_table, ...)."""
    phases: dict[str, list[float]] = {}
    for line in log.read_text(errors="replace").splitlines():
        if '"batch_progress"' in line:
            event = json.loads(line.split(": ", 1)[1])
            if event["inputRows"] > 0:
                for name, ms in event["durationMs"].items():
                    phases.setdefault(name, []).append(ms / 1000)
        elif '"batch_committed"' in line:
            event = json.loads(line.split(": ", 1)[1])
            if event.get("rows"):
                for name, seconds in event["seconds"].items():
                    phases.setdefault(f"sink.{name}", []).append(seconds)
    return phases


def _breakdown(log: Path, before: dict[str, int]) -> str:
    """Median seconds of each phase over the batches after ``before`` (counts per phase)."""
    parts = []
    for name, values in sorted(_batch_phases(log).items()):
        measured = values[before.get(name, 0) :]
        if measured:
            parts.append(f"{name} p50 {percentile(measured, 50):.3f}s")
    return ", ".join(parts)


def main() -> int:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=float, default=10)
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--trigger", default="1s")
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()
    work = work_dir(args.work, "deltaflow-trickle-")
    kafka = broker(work)
    rows: list[str] = []
    try:
        for job_name in ("deltaflow", "baseline"):
            topic = f"trickle-{job_name}"
            create_topic(kafka.bootstrap_servers, topic, 2)
            config = work / f"{topic}.yaml"
            table = Path(
                write_manifest(
                    config,
                    topic,
                    topic,
                    kafka.bootstrap_servers,
                    Lake(str(work)),
                    max_offsets=100_000,
                    trigger=args.trigger,
                )
            )
            if job_name == "baseline":
                table = table.parent / (table.name + "_baseline")
            log = work / f"{topic}.log"
            start = deltaflow_job if job_name == "deltaflow" else baseline_job
            job = start(config, work, log, available_now=False)
            # Warm up at the same rate: the table created, a few batches, JIT settled.
            deadline = time.monotonic() + 300
            warm = 0
            while _versions(table) < 4:
                if time.monotonic() > deadline or job.proc.poll() is not None:
                    raise SystemExit(f"{job_name} made fewer than 4 commits: see {log}")
                produce(kafka.bootstrap_servers, topic, 10, start=warm, rate=args.rate)
                warm += 10
            phases_before = {k: len(v) for k, v in _batch_phases(log).items()}
            cpu0, v0, t0 = job.cpu.current(), _versions(table), time.monotonic()
            produce(
                kafka.bootstrap_servers,
                topic,
                int(args.rate * args.seconds),
                start=warm,
                rate=args.rate,
            )
            time.sleep(3)
            cpu1, v1, t1 = job.cpu.current(), _versions(table), time.monotonic()
            job.kill()
            batches = v1 - v0
            line = (
                f"{job_name:9s}: {batches} commits in {t1 - t0:.0f}s, "
                f"{(cpu1 - cpu0) / max(batches, 1):.3f} cpu-s per batch, "
                f"{(cpu1 - cpu0) / (t1 - t0):.2f} cores busy on average"
            )
            if job_name == "deltaflow":  # the baseline logs no progress
                line += "\n           per batch: " + _breakdown(log, phases_before)
            print(line, flush=True)
            rows.append(line)
    finally:
        kafka.stop()
    print(f"\n== fixed cost per batch at {args.rate:g} records/s, trigger {args.trigger}")
    for line in rows:
        print(line)
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
