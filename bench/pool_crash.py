"""The stream pool's crash soak: one ``deltaflow pool`` process runs N members (20), each fed
by its own producer (~1% hostile records, transactions half of them aborted), and is SIGKILLed
K times (10) at random moments, restarted on the same members folder each time. Then, per
member: 0 duplicates, 0 lost, no aborted record landed, by (topic, partition, offset) across its
table and dead-letter table; and after each kill, how long until every member committed again
(the target: 3 minutes).

    bash bench/run.sh pool-crash [--members 20] [--kills 10] [--rate 20] [--work DIR]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from common import broker, conclude, create_topic, work_dir
from crash_kit import (
    BackgroundProducer,
    ProcessGroup,
    TableWatch,
    count_landed,
    drained,
    local_spark_args,
    write_config,
)

NAMESPACE = "crash"
# Every member committed again within this long of a kill (issue 35's target).
RECOMMIT_TARGET_SECONDS = 180.0


def pool_argv(work: Path) -> list[str]:
    members = work / "members"
    argv = [sys.executable, "-m", "deltaflow_runtime", "pool", "--members", str(members)]
    argv += ["--namespace", NAMESPACE, "--rescan-seconds", "5", "--report-file"]
    argv += [str(work / "report.json"), *local_spark_args(work)]
    return [*argv, "--conf", "spark.driver.memory=2g"]


@dataclass
class Member:
    """One member: its config, table watch and producer."""

    config: Path
    watch: TableWatch
    producer: BackgroundProducer


def start_members(args: argparse.Namespace, bootstrap: str, work: Path) -> dict[str, Member]:
    """The members' topics, manifests (the pool's folder) and producers, producing."""
    members: dict[str, Member] = {}
    for n in range(args.members):
        name = f"m{n:02d}"
        create_topic(bootstrap, name, 2)
        config, table, checkpoint = write_config(
            work / "members" / f"{name}.yaml", name, name, bootstrap, str(work), max_offsets=5_000
        )
        producer = BackgroundProducer(bootstrap, name, int(args.rate * args.max_life), args.rate)
        producer.start()
        members[name] = Member(config, TableWatch(table, checkpoint), producer)
    return members


def kill_and_restart(
    args: argparse.Namespace, members: dict[str, Member], work: Path
) -> tuple[ProcessGroup, list[float]]:
    """The pool, SIGKILLed ``--kills`` times at random moments and started again each time;
    returns the last pool and, per kill, the seconds until every member committed again."""
    rng = random.Random(35)
    pool = ProcessGroup(pool_argv(work), work / "pool.log")
    recommits: list[float] = []
    for kill in range(1, args.kills + 1):
        time.sleep(rng.uniform(args.min_life, args.max_life))
        before = {name: m.watch.version() for name, m in members.items()}
        pool.kill()
        killed = time.monotonic()
        pool = ProcessGroup(pool_argv(work), work / "pool.log")
        waiting = set(members)
        while waiting and time.monotonic() - killed < 2 * RECOMMIT_TARGET_SECONDS:
            waiting = {n for n in waiting if members[n].watch.version() <= before[n]}
            time.sleep(1)
        took = time.monotonic() - killed
        recommits.append(took if not waiting else float("inf"))
        print(
            f"kill {kill}: every member committed again {took:.0f}s after it"
            if not waiting
            else f"kill {kill}: {len(waiting)} member(s) never committed again: {waiting}",
            flush=True,
        )
    return pool, recommits


def exactly_once(members: dict[str, Member]) -> bool:
    """Per member: every delivered record once in its table or dead-letter table, none lost,
    no aborted one, each row the produced record."""
    ok = True
    for name, member in members.items():
        result = count_landed(member.watch.table, None, member.producer.payloads)
        fine = (
            result.duplicates == result.lost == result.unexpected == result.mismatched == 0
            and result.in_table + result.in_dead_letter == result.produced
        )
        ok &= fine
        print(
            f"{name}: produced {result.produced}, table {result.in_table}, dead letters "
            f"{result.in_dead_letter}, duplicates {result.duplicates}, lost {result.lost}, "
            f"unexpected (aborted among them) {result.unexpected}, aborted in its log "
            f"{len(member.producer.aborted)}" + ("" if fine else "  <- FAILED")
        )
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--members", type=int, default=20)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--rate", type=float, default=20, help="records/s per member")
    parser.add_argument("--min-life", type=float, default=20, help="seconds before a kill, min")
    parser.add_argument("--max-life", type=float, default=60, help="seconds before a kill, max")
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()
    work = work_dir(args.work, "deltaflow-pool-crash-")
    (work / "members").mkdir(parents=True, exist_ok=True)
    kafka = broker(work)
    try:
        members = start_members(args, kafka.bootstrap_servers, work)
        print(f"== {args.members} members at {args.rate:g} records/s each", flush=True)
        pool, recommits = kill_and_restart(args, members, work)
        for member in members.values():
            member.producer.finish(300)
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not all(
            drained(kafka.bootstrap_servers, name, m.config) for name, m in members.items()
        ):
            time.sleep(5)
        exit_code = pool.terminate(timeout=180)
        print(f"== the pool stopped with exit code {exit_code}")
        ok = exit_code == 0 and exactly_once(members)
    finally:
        kafka.stop()
    worst = max(recommits, default=float("inf"))
    print(
        f"\n== pool crash soak: {args.members} members, {len(recommits)} SIGKILLs; every member "
        f"committed again within {worst:.0f}s of each kill (target {RECOMMIT_TARGET_SECONDS:.0f}s)"
    )
    ok &= worst <= RECOMMIT_TARGET_SECONDS
    return conclude(ok, "exactly once held", work, args.work)


if __name__ == "__main__":
    raise SystemExit(main())
