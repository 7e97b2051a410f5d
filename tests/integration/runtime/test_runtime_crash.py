"""Exactly once across crashes: SIGKILL a real driver process while records arrive.

CI size: >= 9k records at ~300/s for the whole kill phase (~1% hostile: eight kinds of bad
record, so every batch has dead letters, and aborted transactions), three aimed kills, a life
stopped by SIGTERM mid-batch, then a last life drains, all on the object store. The >= 1M record
soak is ``bash bench/run.sh crash``: the same harness (crash_kit) at full size.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from crash_kit import (
    LOCAL_MODE_DRIVER_ENV,
    BackgroundProducer,
    Driver,
    count_landed,
    crash_soak,
    drained,
    started_lives,
    write_config,
)
from runtime_kit import create_topic, unique, wait_for

from deltaflow_runtime.jvm_archive import ARCHIVE_NAME
from devstack.kafka import KafkaBroker
from devstack.minio import ObjectStore

if TYPE_CHECKING:
    from collections.abc import Callable


pytestmark = [pytest.mark.kafka, pytest.mark.spark]


@pytest.mark.timeout(1500)
def test_sigkill_the_driver_three_times_loses_and_duplicates_nothing(
    kafka: KafkaBroker,
    object_store: ObjectStore,
    tmp_path: Path,
    record_property: Callable[[str, object], None],
) -> None:
    # Everything on the object store, as in production: the table, its dead-letter table and the
    # checkpoint on s3a://, commits through S3ConditionalLogStore. (A kill on local files:
    # test_runtime_stream's dead letters surviving a kill before their commit.)
    topic = unique("crash")
    create_topic(kafka.bootstrap_servers, topic, partitions=3)
    result = crash_soak(
        kafka.bootstrap_servers,
        topic,
        tmp_path / "soak",
        # Produced while the kills happen (about 45 s at this rate): a bigger floor only made
        # the test wait for the producer.
        records=9_000,
        # Each aimed kill once. Right after a table commit, the kill lands before that
        # batch's dead-letter commit (they wait in the driver and are committed later). A
        # window is missed only when no batch comes for 60 s. The full-size soak, bench/run.sh
        # crash, also kills at random moments, ten times over a million records.
        kills=3,
        strategies=("after-table-commit", "mid-write", "after-plan"),
        rate=300,
        max_offsets=3_000,
        store=object_store,
        # Each driver starts as a small stream's pod does (C1): 3-5 s less a restart at this volume.
        local_mode_jvm=True,
    )
    print(result.summary())
    for restart in result.restarts:
        record_property(f"recovery_seconds_{restart.number}", round(restart.recovery_seconds, 1))

    assert len(result.restarts) == 3
    assert result.duplicates == 0
    assert result.lost == 0
    assert result.unexpected == 0
    assert result.mismatched == 0
    # SIGTERM mid-batch: that batch finished and the checkpoint marks it done; at most the batch
    # Spark planned right after it is left for the next start.
    assert result.sigterm_in_flight is not None
    in_flight, planned, done = result.sigterm_in_flight
    assert done >= in_flight
    assert planned - done in (0, 1)
    assert result.aborted > 0  # transactions aborted after their records reached the log ...
    assert result.aborted_landed == 0  # ... and none of those records landed
    assert result.produced >= 9_000
    assert result.in_table + result.in_dead_letter == result.produced
    # The kills that matter most landed where they aim: mid-write and right after the commit
    # (after-plan's window is a moment on the object store: it is tried, not required).
    hits = {r.strategy for r in result.restarts if r.hit}
    assert {"mid-write", "after-table-commit"} <= hits
    # ... and a kill right after the table's commit came before that batch's dead-letter commit:
    # the restart had to finish the half-written batch (and did: nothing lost above).
    assert any(r.before_dead_letters for r in result.restarts), result.summary()
    assert result.in_dead_letter >= result.produced // 100


@pytest.mark.timeout(900)
def test_two_drivers_of_one_stream_one_stops_and_the_table_stays_exactly_once(
    kafka: KafkaBroker, tmp_path: Path
) -> None:
    # Two real driver processes of one stream (same config, same checkpoint), as a second pod
    # would be if the operator's guards failed: the backstop is Spark's checkpoint (a batch is
    # planned by one writer) and Delta's transaction id (a batch is committed once).
    bootstrap = kafka.bootstrap_servers
    topic = unique("twins")
    create_topic(bootstrap, topic, partitions=2)
    config, table, _ = write_config(
        tmp_path / "ingestion.yaml", "twins", topic, bootstrap, str(tmp_path), max_offsets=500
    )
    producer = BackgroundProducer(bootstrap, topic, total=6_000, rate=300)
    producer.start()
    logs = [tmp_path / "driver-1.log", tmp_path / "driver-2.log"]
    # Started as a small stream's driver pod is (C1 only: the suite's seconds).
    drivers = [Driver(config, tmp_path, log, env=LOCAL_MODE_DRIVER_ENV) for log in logs]
    try:
        deadline = time.monotonic() + 300
        while all(d.alive() for d in drivers) and time.monotonic() < deadline:
            time.sleep(0.5)
        stopped = [d for d in drivers if not d.alive()]
        assert len(stopped) == 1, "both drivers kept running on one checkpoint"
        assert stopped[0].proc.returncode != 0
        survivor = next(d for d in drivers if d.alive())
        # Its JVM started from the class-data archive stack/install/jvm-archive.sh built (the
        # seconds every local driver start saves: deltaflow_runtime/jvm_archive.py).
        archives = {f for f in survivor.mapped_files() if f.endswith(ARCHIVE_NAME)}
        assert archives, "the driver JVM maps no archive: run bash stack/install/jvm-archive.sh"
        producer.finish(timeout=600)
        wait_for(lambda: drained(bootstrap, topic, config), 300, "the survivor to drain")
        assert survivor.terminate(timeout=120) == 0
    finally:
        for driver in drivers:
            if driver.alive():
                driver.kill()
    said = logs[drivers.index(stopped[0])].read_text().splitlines()
    print("the stopped driver:", [line for line in said if line.startswith("deltaflow: ")])
    result = count_landed(table, None, producer.payloads)
    print(result.summary())
    assert result.produced >= 6_000
    assert (result.duplicates, result.lost, result.unexpected, result.mismatched) == (0, 0, 0, 0)


@pytest.mark.timeout(300)
def test_sigterm_while_the_driver_starts_exits_zero_and_starts_no_stream(
    kafka: KafkaBroker, tmp_path: Path
) -> None:
    # Kubernetes deletes a pod whenever it likes, also while its JVM starts: the stop is as
    # graceful then as mid-stream (exit 0, nothing half-done), not a death by signal (143).
    topic = unique("early-stop")
    create_topic(kafka.bootstrap_servers, topic, partitions=1)
    config, table, checkpoint = write_config(
        tmp_path / "ingestion.yaml",
        "early",
        topic,
        kafka.bootstrap_servers,
        str(tmp_path),
        max_offsets=100,
    )
    log = tmp_path / "driver.log"
    driver = Driver(config, tmp_path, log)
    try:
        wait_for(lambda: started_lives(log) == 1, 120, "the driver to start")
        code = driver.terminate(timeout=120)
    finally:
        if driver.alive():
            driver.kill()
    said = log.read_text()
    assert code == 0, said[-3000:]
    assert "the stream is not started" in said
    assert not Path(table, "_delta_log").exists()
    assert not Path(checkpoint, "offsets").exists()
