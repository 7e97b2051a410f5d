"""A driver's start: spawn to its first committed batch, with and without the JVM class-data
archive (deltaflow_runtime/jvm_archive.py), alternating in one run on one table. Each start
resumes the same stream from its checkpoint with a backlog waiting (as a recovery does), then is
SIGKILLed once it has committed.

    bash bench/run.sh start [--starts 5] [--records 40000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time
from pathlib import Path

from common import broker, create_topic, work_dir
from crash_kit import BackgroundProducer, Driver, TableWatch, write_config

from deltaflow_runtime.jvm_archive import ENV_JVM_ARCHIVE, find_archive
from deltaflow_runtime.session import cache_dir


def _first_commit(driver: Driver, watch: TableWatch, before: int, timeout: float = 300) -> float:
    deadline = time.monotonic() + timeout
    while watch.version() <= before:
        if time.monotonic() > deadline or not driver.alive():
            raise RuntimeError("the driver committed nothing")
        time.sleep(0.05)
    return time.monotonic() - driver.started


def main() -> int:
    """Run the starts and print their figures."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--starts", type=int, default=5, help="starts of each kind")
    parser.add_argument("--records", type=int, default=40_000, help="the backlog")
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()
    archive = find_archive(os.environ, cache_dir(os.environ))
    if archive is None:
        print("no archive: run bash stack/install/jvm-archive.sh")
        return 2
    work = work_dir(args.work, "deltaflow-start-")
    kafka = broker(work)
    try:
        create_topic(kafka.bootstrap_servers, "start", 4)
        producer = BackgroundProducer(kafka.bootstrap_servers, "start", args.records, 5000)
        producer.start()
        producer.finish(timeout=600)
        config, table, checkpoint = write_config(
            work / "ingestion.yaml",
            "start",
            "start",
            kafka.bootstrap_servers,
            str(work),
            max_offsets=max(1, args.records // (4 * args.starts + 4)),
        )
        watch = TableWatch(table, checkpoint)
        kinds = {"without": {ENV_JVM_ARCHIVE: ""}, "with archive": {ENV_JVM_ARCHIVE: str(archive)}}
        seconds: dict[str, list[float]] = {kind: [] for kind in kinds}
        # A first start creates the table (not a recovery): not counted.
        for number in range(args.starts * 2 + 1):
            kind = "without" if number % 2 else "with archive"
            driver = Driver(config, work, work / "driver.log", env=kinds[kind])
            try:
                took = _first_commit(driver, watch, watch.version())
            finally:
                driver.kill()
            if number:
                seconds[kind].append(took)
                print(f"start {number} ({kind}): first commit after {took:.1f}s", flush=True)
    finally:
        kafka.stop()
    print("\n== driver start: spawn -> first committed batch (a recovery with a backlog)")
    for kind, values in seconds.items():
        print(
            f"{kind:>13}: p50 {statistics.median(values):.1f}s, max {max(values):.1f}s "
            f"over {len(values)} starts"
        )
    ratio = statistics.median(seconds["with archive"]) / statistics.median(seconds["without"])
    print(f"with archive / without (p50): {ratio:.2f}; archive {archive}")
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
