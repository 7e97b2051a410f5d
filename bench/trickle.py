"""A stream at a trickle (10 records/s): CPU per batch and on average, idle CPU, memory, and each
record's age at its commit, Deltaflow's runtime vs the minimal hand-written job, same manifest and
Spark settings. With --freshness the interval follows the target (the baseline runs at the
interval Deltaflow's driver moved to).

    bash bench/run.sh trickle [--rate 10] [--seconds 120] [--trigger 1s | --freshness 60]
                              [--idle-seconds 60] [--profile]

--profile breaks each job's CPU per batch down by JVM thread group and, from a JFR recording of
the measured window, by what its Java code was doing (bench/jvm_profile.py).
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
    baseline_job,
    broker,
    create_topic,
    deltaflow_job,
    percentile,
    produce,
    work_dir,
    write_manifest,
)
from jvm_profile import Recording, by_thread_group, jvm_pid, report, thread_cpu
from runtime_kit import ages_at_commit

from deltaflow_api.driver_pod import ENV_SPARK_MASTER, local_master
from deltaflow_runtime.cost import process_figures


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


def _interval(log: Path) -> float | None:
    """The trigger interval the Deltaflow driver ran last (from its log)."""
    interval = None
    for line in log.read_text(errors="replace").splitlines():
        if '"trigger_replanned"' in line:
            interval = float(json.loads(line.split(": ", 1)[1])["toSeconds"])
        elif '"stream_starting"' in line:
            trigger = json.loads(line.split(": ", 1)[1]).get("trigger")
            if isinstance(trigger, dict):
                interval = float(trigger["intervalSeconds"])
    return interval


def _rss(job: Job) -> int:
    """Resident bytes of the job's processes now."""
    return process_figures(list(job.cpu.per_pid)).rss_bytes


class _Profile:
    """The breakdown of one job's measured window (started at construction)."""

    def __init__(self, job: Job, path: Path) -> None:
        self.job = job
        pid = jvm_pid(list(job.cpu.per_pid))
        if pid is None:
            raise SystemExit("--profile: no JVM found in the job's process group")
        self.pid = pid
        self.recording = Recording(pid, path)
        self.python0 = self._python()
        self.threads0, self.total0 = thread_cpu(pid), process_figures([pid]).cpu_seconds
        self.recording.start()

    def _python(self) -> float:
        self.job.cpu.current()
        return self.job.cpu.per_pid.get(self.job.proc.pid, 0.0)

    def stop(self, batches: int) -> str:
        threads1, total1 = thread_cpu(self.pid), process_figures([self.pid]).cpu_seconds
        python = self._python() - self.python0
        samples = self.recording.stop()
        groups = by_thread_group(self.threads0, threads1, total1 - self.total0)
        return report(groups, samples, batches, python)


def main() -> int:  # noqa: PLR0915 - one run of two jobs, told step by step
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=float, default=10)
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--trigger", default=None, help="pin the interval (default: 1s)")
    parser.add_argument(
        "--freshness",
        type=int,
        default=None,
        help="spec.freshness.targetSeconds instead of a pinned trigger; the baseline is pinned "
        "to the interval Deltaflow's driver ran last",
    )
    parser.add_argument("--idle-seconds", type=float, default=60, help="then idle this long")
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--profile", action="store_true", help="CPU by thread and phase (JFR)")
    parser.add_argument(
        "--warm-commits",
        type=int,
        default=4,
        help="commits before the measured window (a JVM's JIT keeps compiling for minutes)",
    )
    parser.add_argument("--jobs", default="deltaflow,baseline", help="which jobs, in order")
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="K=V",
        help="spec.sparkConf of the manifest both jobs run (repeatable)",
    )
    parser.add_argument(
        "--plain-driver",
        action="store_true",
        help="run Deltaflow's driver as a local run, not as the local-mode driver pod the "
        "operator gives a small stream (which also picks its JVM options: session.py)",
    )
    args = parser.parse_args()
    trigger = None if args.freshness is not None else (args.trigger or "1s")
    work = work_dir(args.work, "deltaflow-trickle-")
    kafka = broker(work)
    rows: list[str] = []
    interval: float | None = None
    try:
        for job_name in args.jobs.split(","):
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
                    trigger=trigger,
                    freshness=args.freshness,
                    spark_conf=dict(c.split("=", 1) for c in args.spark_conf) or None,
                )
            )
            if job_name == "baseline":
                table = table.parent / (table.name + "_baseline")
            log = work / f"{topic}.log"
            if job_name == "deltaflow":
                # What the operator's local-mode driver pod says (builders.driver.spark_master).
                pod = None if args.plain_driver else {ENV_SPARK_MASTER: local_master(2)}
                job = deltaflow_job(config, work, log, available_now=False, env=pod)
            else:
                job = baseline_job(config, work, log, available_now=False, interval=interval)
            # Warm up at the same rate: the table created, a few batches, JIT settled.
            deadline = time.monotonic() + 600 + 60 * args.warm_commits
            warm = 0
            while _versions(table) < args.warm_commits:
                if time.monotonic() > deadline or job.proc.poll() is not None:
                    raise SystemExit(
                        f"{job_name} made fewer than {args.warm_commits} commits: see {log}"
                    )
                produce(kafka.bootstrap_servers, topic, 10, start=warm, rate=args.rate)
                warm += 10
            phases_before = {k: len(v) for k, v in _batch_phases(log).items()}
            cpu0, v0, t0 = job.cpu.current(), _versions(table), time.monotonic()
            profile = _Profile(job, work / f"{topic}.jfr") if args.profile else None
            produce(
                kafka.bootstrap_servers,
                topic,
                int(args.rate * args.seconds),
                start=warm,
                rate=args.rate,
            )
            # The last records' batch: within an interval (the target, with --freshness).
            time.sleep(3 if args.freshness is None else args.freshness + 3)
            cpu1, v1, t1 = job.cpu.current(), _versions(table), time.monotonic()
            breakdown = profile.stop(v1 - v0) if profile else None
            memory = _rss(job)
            time.sleep(args.idle_seconds)
            cpu2, t2 = job.cpu.current(), time.monotonic()
            job.kill()
            if job_name == "deltaflow" and args.freshness is not None:
                interval = _interval(log)
            batches = v1 - v0
            ages = sorted(ages_at_commit(str(table), after_version=v0 - 1))
            line = (
                f"{job_name:9s}: {batches} commits in {t1 - t0:.0f}s, "
                f"{(cpu1 - cpu0) / max(batches, 1):.3f} cpu-s per batch, "
                f"{(cpu1 - cpu0) / (t1 - t0):.3f} cores busy on average, "
                f"{(cpu2 - cpu1) / (t2 - t1):.4f} idle, memory {memory / 2**30:.2f} GiB, "
                f"age at commit p50 {percentile(ages, 50):.1f}s p99 {percentile(ages, 99):.1f}s"
            )
            if job_name == "deltaflow":  # the baseline logs no progress
                line += f", last interval {_interval(log)}s"
                line += "\n           per batch: " + _breakdown(log, phases_before)
            if breakdown:
                line += "\n" + breakdown
            print(line, flush=True)
            rows.append(line)
    finally:
        kafka.stop()
    cadence = f"freshness target {args.freshness}s" if args.freshness else f"trigger {trigger}"
    print(f"\n== cost at {args.rate:g} records/s, {cadence}")
    for line in rows:
        print(line)
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
