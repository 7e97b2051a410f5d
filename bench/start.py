"""A driver's start: spawn to its first committed batch, as a recovery or a move pays it. Each
start resumes the same stream from its checkpoint with a backlog waiting, then ends once it has
committed, in turns of three kinds of driver on one table:

- ``local mode``: what a small stream's driver pod runs (spec.scaling.minExecutors 0): the JVM
  class-data archive and the local-mode JVM options (C1 only, session.LOCAL_MODE_JAVA_OPTIONS);
- ``archive``: the archive, both JIT compilers (a driver with executor pods);
- ``without``: neither (the JVM's defaults).

``--after stop`` (the default) ends each start with SIGTERM, as a move or a rollout does: the
batch finishes and Delta writes its checksum. ``--after kill`` SIGKILLs each start the moment
its second commit lands, before Delta writes that version's checksum (a crash's worst moment):
the next start finds the table's state from the checksum before and the commit after it.
About 1% of the records are hostile, so such a crash leaves dead letters waiting, which the next
start writes before its query starts; ``--clean`` produces none (a clean stream's crash).

Per kind it prints the p50/max and where the time went, from the runtime's own log
(``startupSeconds`` of its ``stream_starting`` event, ``sinceProcessStart`` of its first
``batch_progress``).

    bash bench/run.sh start [--starts 5] [--records 40000] [--after stop|kill] [--clean]
                            [--kinds "local mode,archive,without"]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import time
from pathlib import Path

from common import broker, create_topic, work_dir
from crash_kit import LOCAL_MODE_DRIVER_ENV, BackgroundProducer, Driver, TableWatch, write_config

from deltaflow_runtime.jvm_archive import ENV_JVM_ARCHIVE, find_archive
from deltaflow_runtime.session import cache_dir

PHASES = ("interpreter", "sparkSession", "accessChecks", "guards")


def _first_commit(driver: Driver, watch: TableWatch, before: int, timeout: float = 300) -> float:
    deadline = time.monotonic() + timeout
    while watch.version() <= before:
        if time.monotonic() > deadline or not driver.alive():
            raise RuntimeError("the driver committed nothing")
        time.sleep(0.05)
    return time.monotonic() - driver.started


def _events(log: Path) -> dict[str, dict[str, object]]:
    """The runtime's first ``stream_starting`` and ``batch_progress`` events in a driver log."""
    found: dict[str, dict[str, object]] = {}
    for line in log.read_text(errors="replace").splitlines():
        _, brace, rest = line.partition("{")
        if not brace:
            continue
        try:
            event = json.loads(brace + rest)
        except ValueError:
            continue
        if isinstance(event, dict):
            found.setdefault(str(event.get("event")), event)
    return found


def _phases(log: Path) -> dict[str, float]:
    """Seconds per start-up phase, and to the first batch's progress, of one start."""
    events = _events(log)
    starting = events.get("stream_starting", {}).get("startupSeconds")
    phases = {k: float(v) for k, v in starting.items()} if isinstance(starting, dict) else {}
    first = events.get("batch_progress", {}).get("sinceProcessStart")
    if isinstance(first, int | float):
        phases["firstBatch"] = float(first) - sum(phases.get(p, 0.0) for p in PHASES)
        phases["total"] = float(first)
    return phases


def _report(
    seconds: dict[str, list[float]], phases: dict[str, list[dict[str, float]]], after: str
) -> None:
    print(f"\n== driver start: spawn -> first committed batch (a recovery after {after})")
    for kind, values in seconds.items():
        print(
            f"{kind:>10}: p50 {statistics.median(values):.1f}s, max {max(values):.1f}s "
            f"over {len(values)} starts"
        )
    print("\n-- where it went (p50 seconds, from the runtime's log)")
    columns = [*PHASES, "firstBatch", "total"]
    print(f"{'':>10}  " + "  ".join(f"{c:>12}" for c in columns))
    for kind, runs in phases.items():
        cells = []
        for column in columns:
            values = [run[column] for run in runs if column in run]
            cells.append(f"{statistics.median(values):12.1f}" if values else f"{'-':>12}")
        print(f"{kind:>10}  " + "  ".join(cells))
    if seconds.get("without"):  # the baseline, when it ran
        base = statistics.median(seconds["without"])
        for kind in ("local mode", "archive"):
            if seconds.get(kind):
                print(f"{kind} / without (p50): {statistics.median(seconds[kind]) / base:.2f}")


def _kinds(asked: str, archive: Path) -> dict[str, dict[str, str]] | None:
    """The drivers' environments by kind, of those ``--kinds`` names (None: a name unknown)."""
    every = {
        "local mode": {ENV_JVM_ARCHIVE: str(archive), **LOCAL_MODE_DRIVER_ENV},
        "archive": {ENV_JVM_ARCHIVE: str(archive)},
        "without": {ENV_JVM_ARCHIVE: ""},
    }
    names = [kind.strip() for kind in asked.split(",") if kind.strip()]
    unknown = [kind for kind in names if kind not in every]
    if unknown or not names:
        print(f"--kinds: unknown {unknown}; choose from {', '.join(every)}")
        return None
    return {kind: every[kind] for kind in names}


def main() -> int:
    """Run the starts and print their figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--starts", type=int, default=5, help="starts of each kind")
    parser.add_argument("--records", type=int, default=40_000, help="the backlog")
    parser.add_argument("--after", choices=("stop", "kill"), default="stop")
    parser.add_argument(
        "--clean",
        action="store_true",
        help="no hostile records (a killed driver leaves no dead letters waiting)",
    )
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument(
        "--kinds",
        default="local mode,archive,without",
        help="which kinds of driver, comma-separated (default: all three)",
    )
    args = parser.parse_args()
    archive = find_archive(os.environ, cache_dir(os.environ))
    if archive is None:
        print("no archive: run bash stack/install/jvm-archive.sh")
        return 2
    kinds = _kinds(args.kinds, archive)
    if kinds is None:
        return 2
    names = list(kinds)
    work = work_dir(args.work, "deltaflow-start-")
    kafka = broker(work)
    seconds: dict[str, list[float]] = {kind: [] for kind in kinds}
    phases: dict[str, list[dict[str, float]]] = {kind: [] for kind in kinds}
    try:
        create_topic(kafka.bootstrap_servers, "start", 4)
        producer = BackgroundProducer(
            kafka.bootstrap_servers, "start", args.records, 5000, hostile=not args.clean
        )
        producer.start()
        producer.finish(timeout=600)
        config, table, checkpoint = write_config(
            work / "ingestion.yaml",
            "start",
            "start",
            kafka.bootstrap_servers,
            str(work),
            max_offsets=max(1, args.records // (len(kinds) * args.starts * 2 + 4)),
        )
        watch = TableWatch(table, checkpoint)
        # A first start creates the table (not a recovery): not counted.
        for number in range(args.starts * len(kinds) + 1):
            kind = names[(number - 1) % len(kinds)]
            log = work / f"driver-{number}.log"
            driver = Driver(config, work, log, env=kinds[kind])
            try:
                took = _first_commit(driver, watch, watch.version())
                if args.after == "stop":
                    driver.terminate(timeout=120)
                else:
                    _first_commit(driver, watch, watch.version())
            finally:
                driver.kill()
            if number:
                seconds[kind].append(took)
                phases[kind].append(_phases(log))
                print(f"start {number} ({kind}): first commit after {took:.1f}s", flush=True)
    finally:
        kafka.stop()
    _report(seconds, phases, "SIGTERM" if args.after == "stop" else "SIGKILL at a commit")
    print(f"archive {archive}")
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
