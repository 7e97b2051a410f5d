"""One member's backlog does not break the other members' freshness: a ``deltaflow pool``
process (local[2]) runs a member with a backlog of 1M records (no maxOffsetsPerTrigger: the
pool reads it 200,000 a batch) and four trickles at 10 records/s with a freshness target of
60 s. Prints how long the backlog took, and each trickle's record ages at their commit while it
drained (p50, p99, max): the target is each trickle's p99 within its 60 s.

    bash bench/run.sh pool-fairness [--backlog 1000000] [--trickles 4] [--rate 10]
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

import yaml
from common import (
    Lake,
    broker,
    conclude,
    create_topic,
    lake,
    percentile,
    produce,
    record_value,
    spark_args,
    work_dir,
    write_manifest,
)
from confluent_kafka import Producer
from crash_kit import ProcessGroup
from runtime_kit import ages_at_commit

TARGET_SECONDS = 60
MAX_SECONDS = 540.0


def _trickle(bootstrap: str, topic: str, rate: float, stop: threading.Event) -> None:
    """Records at ``rate``/s into ``topic`` until ``stop``; all delivered before it returns."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    began, n = time.monotonic(), 0
    while not stop.is_set():
        producer.produce(topic, key=str(n).encode(), value=record_value(n))
        producer.poll(0)
        n += 1
        stop.wait(max(0.0, n / rate - (time.monotonic() - began)))
    producer.flush(60)


def _uncapped(path: Path) -> None:
    """The manifest without maxOffsetsPerTrigger: the pool's own cap applies."""
    document = yaml.safe_load(path.read_text())
    del document["spec"]["source"]["maxOffsetsPerTrigger"]
    path.write_text(yaml.safe_dump(document))


def _rows(table: str) -> int:
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        adds = DeltaTable(table).get_add_actions(flatten=True).column("num_records")
        return sum(n for n in adds.to_pylist() if n)
    except TableNotFoundError:
        return 0


def _report_trickle(name: str, table: str) -> bool:
    """Print a trickle's record ages at their commit; whether its p99 kept the target."""
    ages = ages_at_commit(table)
    p99 = percentile(ages, 99)
    print(
        f"{name}: {len(ages)} records, age at commit p50 {percentile(ages, 50):.1f}s, "
        f"p99 {p99:.1f}s, max {max(ages, default=float('nan')):.1f}s (target p99 "
        f"{TARGET_SECONDS}s)"
    )
    return bool(ages) and p99 <= TARGET_SECONDS


def _write_members(
    args: argparse.Namespace, folder: Path, bootstrap: str, where: Lake
) -> tuple[str, dict[str, str]]:
    """The members' manifests and topics, the backlog produced; returns the tables."""
    create_topic(bootstrap, "backlog", 4)
    backlog = write_manifest(
        folder / "backlog.yaml", "backlog", "backlog", bootstrap, where, max_offsets=1, trigger="1s"
    )
    _uncapped(folder / "backlog.yaml")
    print(f"== producing the backlog: {args.backlog:,} records", flush=True)
    produce(bootstrap, "backlog", args.backlog)
    trickles = {}
    for n in range(args.trickles):
        name = f"trickle{n}"
        create_topic(bootstrap, name, 2)
        trickles[name] = write_manifest(
            folder / f"{name}.yaml", name, name, bootstrap, where,
            max_offsets=10_000, trigger=None, freshness=TARGET_SECONDS,
        )  # fmt: skip
    return backlog, trickles


def _run_pool(work: Path, backlog: str, records: int) -> tuple[int, float | None]:
    """The pool until the backlog landed and a minute more; its exit code and the seconds the
    backlog took (None: it never landed)."""
    argv = [sys.executable, "-m", "deltaflow_runtime", "pool", "--members", str(work / "members")]
    argv += ["--namespace", "bench", *spark_args(work), "--conf", "spark.driver.memory=2g"]
    started = time.monotonic()
    pool = ProcessGroup(argv, work / "pool.log")
    print("== the pool runs: the backlog member and the trickles", flush=True)
    drained_in = None
    while time.monotonic() - started < MAX_SECONDS:
        if drained_in is None and _rows(backlog) >= records:
            drained_in = time.monotonic() - started
            print(f"backlog landed {drained_in:.0f}s after the pool started", flush=True)
        if drained_in is not None and time.monotonic() - started > drained_in + 60:
            break
        time.sleep(5)
    return pool.terminate(timeout=180), drained_in


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backlog", type=int, default=1_000_000)
    parser.add_argument("--trickles", type=int, default=4)
    parser.add_argument("--rate", type=float, default=10, help="records/s per trickle")
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()
    work = work_dir(args.work, "deltaflow-pool-fairness-")
    (work / "members").mkdir(parents=True, exist_ok=True)
    kafka = broker(work)
    stop = threading.Event()
    producers: list[threading.Thread] = []
    try:
        backlog, trickles = _write_members(
            args, work / "members", kafka.bootstrap_servers, lake(work, object_store=False)
        )
        # The trickles run from before the pool starts until after the backlog is gone.
        for name in trickles:
            producers.append(
                threading.Thread(
                    target=_trickle, args=(kafka.bootstrap_servers, name, args.rate, stop)
                )
            )
            producers[-1].start()
        exit_code, drained_in = _run_pool(work, backlog, args.backlog)
    finally:
        stop.set()
        for producer in producers:
            producer.join(60)
        kafka.stop()
    ok = exit_code == 0 and drained_in is not None
    landed = "-" if drained_in is None else f"{drained_in:.0f}s"
    print(f"\n== pool fairness: backlog of {args.backlog:,} landed in {landed}; exit {exit_code}")
    for name, table in trickles.items():
        ok &= _report_trickle(name, table)
    return conclude(ok, "the trickles kept their target", work, args.work)


if __name__ == "__main__":
    code = main()
    # Leave without the interpreter's shutdown: a native library's thread (librdkafka or
    # delta-rs) aborted it after every figure was printed (exit 134 for a run that held).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
