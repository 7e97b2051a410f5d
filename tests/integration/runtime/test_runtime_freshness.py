"""Freshness as the user's knob, on a real Kafka and real Spark + Delta: the driver derives its
trigger from spec.freshness, moves to a longer interval once it has measured its batches (a query
restart between batches, exactly once across it), and the records land within the target,
measured independently from the table (each row's Kafka timestamp against the Delta commit that
added it)."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from runtime_kit import (
    Sent,
    ages_at_commit,
    create_topic,
    duplicates,
    manifest,
    order,
    pipeline,
    produce,
    tpos,
    unique,
    wait_for,
)

from deltaflow_api.cadence import DEFAULT_CHECKPOINT_BATCH_SECONDS, TriggerPlan, plan_trigger
from deltaflow_runtime.stream import StreamOptions, StreamRunner
from devstack.kafka import KafkaBroker

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

TARGET_SECONDS = 10


def test_a_trickle_lands_within_its_freshness_target_on_the_interval_the_driver_derives(
    kafka: KafkaBroker, runtime_spark: SparkSession, tmp_path: Path
) -> None:
    bootstrap = kafka.bootstrap_servers
    topic = unique("fresh")
    create_topic(bootstrap, topic, partitions=2)
    doc = manifest(
        unique("fresh"), topic, bootstrap, tmp_path, spec={"freshness": {"targetSeconds": 10}}
    )
    del doc["spec"]["trigger"]  # derived from the target, not pinned
    runner = _start(runtime_spark, doc)
    first = runner.plan
    # Before any batch, the plan assumes the default batch time: a short interval.
    assert first == plan_trigger(TARGET_SECONDS, None)
    assert not first.pinned
    # The driver's main thread: it waits on the query, and moves it to a new plan between batches.
    waiting = threading.Thread(target=runner.wait, daemon=True)
    waiting.start()
    sent: list[Sent] = []
    stop = threading.Event()

    def trickle() -> None:  # two records a second, as a small stream
        i = 0
        while not stop.is_set():
            sent.extend(produce(bootstrap, topic, [(b"k", order(i)), (b"k", order(i + 1))]))
            i += 2
            stop.wait(1.0)

    producer = threading.Thread(target=trickle, daemon=True)
    producer.start()
    try:
        # Batches measured (steady and checkpointing ones), the driver moves to the interval they
        # allow (a query restart between batches; again should later batches move it), then
        # keeps landing the trickle at that pace.
        wait_for(
            lambda: runner.plan.measured and runner.plan.interval_seconds > first.interval_seconds,
            120,
            "the plan from measured batches",
        )
        wait_for(
            lambda: (
                sum(
                    b.committed_at > runner.plan_since for b in runner.freshness.recent(time.time())
                )
                >= 4
            ),
            120,
            "four batches on the interval the measured batches allow",
        )
        # The plan those batches ran on (a later move, should one come, ends their span).
        moved, restarted = runner.plan, runner.plan_since
    finally:
        stop.set()
        producer.join(30)
    expected = {s.tpo for s in sent}
    path = runner.pipeline.identity.table_path
    wait_for(lambda: _landed(path) >= len(expected), 120, "the trickle's last records")
    runner.options.stop.set()  # as SIGTERM does: the stream stops between batches
    waiting.join(120)
    assert not waiting.is_alive()
    until = runner.plan_since if runner.plan_since != restarted else time.time()
    assert moved.measured, moved
    assert moved.reachable, moved
    assert moved.checkpoint_batch_seconds != DEFAULT_CHECKPOINT_BATCH_SECONDS, "measured"
    reported_at = time.time()
    report: dict[str, Any] = runner.freshness_report(reported_at)
    runner.sample_cost()
    cost = runner.cost.report()
    _check_the_table(path, expected, moved, (restarted, until))
    # What the driver reports agrees with the table's own timestamps, over the same window.
    ages = sorted(ages_at_commit(path, since=reported_at - report["windowSeconds"]))
    assert report["triggerSeconds"] == runner.plan.interval_seconds
    assert report["triggerPinned"] is False
    assert report["p99Seconds"] <= TARGET_SECONDS
    assert abs(report["p99Seconds"] - ages[int(0.99 * (len(ages) - 1))]) < 2.0, (report, ages)
    _check_cost(cost, len(expected))


def _start(spark: SparkSession, doc: dict[str, Any]) -> StreamRunner:
    """The stream started on a new table whose log Delta checkpoints every 3 commits (10 by
    default): the slower batch that does it comes early and often, and the plan must leave
    room for it. (The query's session is a copy made at its start: the table, created by the
    first batch, gets the setting.)"""
    defaults = "spark.databricks.delta.properties.defaults.checkpointInterval"
    spark.conf.set(defaults, "3")
    try:
        runner = StreamRunner(spark, pipeline(doc), StreamOptions())
        runner.start()
    finally:
        spark.conf.unset(defaults)
    return runner


def _check_cost(cost: dict[str, Any] | None, records: int) -> None:
    """Its cost, measured: a local driver (no executor), the trickle's records counted."""
    assert cost is not None
    assert cost["cpuSecondsPerHour"] > 0
    assert cost["executorSecondsPerHour"] == 0
    assert cost["records"] == records
    assert cost["driverMemoryBytes"] > 200 * 2**20  # Python and the JVM


def _check_the_table(
    path: str,
    expected: set[tuple[str, int, int]],
    moved: TriggerPlan,
    span: tuple[float, float],
) -> None:
    """Exactly once across the query's restart; every record within the target, measured from
    the table; on the new interval, at most a batch per interval."""
    from deltalake import DeltaTable

    rows = tpos(DeltaTable(path).to_pyarrow_table().to_pylist())
    assert duplicates(rows) == []
    assert set(rows) == expected
    # The p99 is the promise. The records that waited through the move (the query stopped,
    # the start-up checks run again) may be a little later: within half a target more.
    ages = sorted(ages_at_commit(path))
    assert len(ages) == len(expected)
    p99 = ages[int(0.99 * (len(ages) - 1))]
    assert p99 <= TARGET_SECONDS, f"p99 age {p99:.1f} s, target {TARGET_SECONDS} s"
    assert ages[-1] <= 1.5 * TARGET_SECONDS, f"worst age {ages[-1]:.1f} s"
    commits = sorted(
        h["timestamp"] / 1000
        for h in DeltaTable(path).history()
        if h["operation"] in {"STREAMING UPDATE", "WRITE"}
    )
    # The restarted query runs its first batch at once; Spark aligns the next ones to the interval
    # (a batch that overran its slot is followed at once: the median gap, not the smallest).
    later = [t for t in commits if span[0] < t < span[1]][1:]
    assert len(later) >= 3, commits
    gaps = sorted(b - a for a, b in itertools.pairwise(later))
    assert gaps[len(gaps) // 2] >= moved.interval_seconds - 2.0, (moved, gaps)


def _landed(path: str) -> int:
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(path).to_pyarrow_table(columns=["_kafka_offset"]).num_rows
    except TableNotFoundError:
        return 0
