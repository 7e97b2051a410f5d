"""A stream pool on the real Kafka and Spark: members that share one SparkContext and stay
streams of their own (exactly once each, their own failures, their own metrics).

The pool runs in this process on the session-wide SparkSession, as ``deltaflow pool`` runs it on
the one it builds; each member gets a session of its own from it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from runtime_kit import (
    create_topic,
    duplicates,
    manifest,
    order,
    pipeline,
    produce,
    read_table,
    tpos,
    unique,
    wait_for,
)

from deltaflow_runtime.pool import PoolOptions, StreamPool
from devstack.kafka import KafkaBroker

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from runtime_kit import Sent

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

NAMESPACE = "test"  # runtime_kit.manifest's


def _records(start: int, count: int) -> list[tuple[bytes | None, bytes | None]]:
    """Orders, one in ten of them not JSON (a dead letter)."""
    return [(b"%d" % i, b"{" if i % 10 == 3 else order(i)) for i in range(start, start + count)]


def _landed(document: dict[str, Any]) -> set[tuple[str, int, int]]:
    """(topic, partition, offset) of every row of the member's table and dead-letter table;
    fails on a duplicate."""
    ident = pipeline(document).identity
    keys: list[tuple[str, int, int]] = []
    for path in (ident.table_path, ident.dead_letter_table_path):
        try:
            keys += tpos(read_table(path))
        except Exception:  # not created yet
            continue
    assert not duplicates(keys), duplicates(keys)[:5]
    return set(keys)


@dataclass
class Members:
    """The test's members: manifests, what was produced to each, their keys in the pool."""

    bootstrap: str
    folder: Path
    docs: dict[str, dict[str, Any]] = field(default_factory=dict)
    sent: dict[str, list[Sent]] = field(default_factory=dict)

    def key(self, name: str) -> str:
        return f"{NAMESPACE}/{self.docs[name]['metadata']['name']}"

    def add(self, name: str, root: Path) -> None:
        topic = unique(f"pool-{name}")
        create_topic(self.bootstrap, topic, partitions=2)
        self.docs[name] = manifest(unique(f"pool-{name}"), topic, self.bootstrap, root)
        self.write(name)
        self.sent[name] = []

    def write(self, name: str) -> None:
        (self.folder / f"{name}.yaml").write_text(yaml.safe_dump(self.docs[name]))

    def produce(self, names: Iterable[str], start: int, count: int) -> None:
        for name in names:
            topic = self.docs[name]["spec"]["source"]["topic"]
            self.sent[name] += produce(self.bootstrap, topic, _records(start, count))

    def wait_landed(self, names: Iterable[str], timeout: float) -> None:
        for name in names:
            wait_for(
                lambda n=name: {s.tpo for s in self.sent[n]} <= _landed(self.docs[n]),
                timeout,
                f"member {name}'s records landed",
            )


def _fail_and_resume(pool: StreamPool, members: Members, name: str) -> None:
    """A foreign file where member ``name``'s next Delta commit goes fails its batch: it alone
    backs off, with the reason, while the others commit; once the file is gone it resumes."""
    log_dir = Path(pipeline(members.docs[name]).identity.table_path) / "_delta_log"
    latest = max(int(p.stem) for p in log_dir.glob("*.json"))
    foreign = log_dir / f"{latest + 1:020d}.json"
    foreign.write_text("not a Delta commit\n")
    members.produce(members.docs, 300, 200)
    key = members.key(name)
    wait_for(lambda: pool.status()[key]["phase"] == "BackingOff", 120, f"{name} backing off")
    failed = pool.status()[key]
    assert failed["failures"] >= 1, failed
    assert failed["reason"], failed
    assert failed["message"], failed
    others = [n for n in members.docs if n != name]
    members.wait_landed(others, 60)
    assert all(pool.status()[members.key(n)]["failures"] == 0 for n in others), pool.status()
    foreign.unlink()
    members.wait_landed([name], 180)
    wait_for(lambda: pool.status()[key]["failures"] == 0, 30, f"{name}'s failures reset")


def _rows_written(pool: StreamPool) -> dict[str, float]:
    """``deltaflow_rows_written_total`` of each member, as the pool's endpoint serves them."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(pool.registries)
    return {
        sample.labels["stream"]: sample.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for sample in family.samples
        if sample.name == "deltaflow_rows_written_total"
    }


def test_pool_members_are_streams_of_their_own_through_a_failure_removal_and_change(
    kafka: KafkaBroker, runtime_spark: SparkSession, tmp_path: Path
) -> None:
    """Three members in one pool land their records exactly once. One member's batch failing
    puts that member alone into backoff, with the reason, while the others keep committing;
    it resumes by itself. A member removed from the folder stops and a changed one restarts,
    the others running on; an invalid manifest is reported and never started. Every member's
    series are on the pool's one metrics endpoint, labelled by stream."""
    members = Members(kafka.bootstrap_servers, tmp_path / "members")
    members.folder.mkdir()
    for name in ("a", "b", "c"):
        members.add(name, tmp_path)
    members.produce(members.docs, 0, 300)
    # Not a DeltaIngestion this pool can run: another namespace.
    stranger = manifest(unique("pool-x"), "x", kafka.bootstrap_servers, tmp_path)
    stranger["metadata"]["namespace"] = "elsewhere"
    (members.folder / "x.yaml").write_text(yaml.safe_dump(stranger))

    stop = threading.Event()
    options = PoolOptions(
        NAMESPACE, rescan_seconds=1, poll_seconds=1, backoff_base_seconds=2, stop=stop
    )
    pool = StreamPool(runtime_spark, members.folder, options)
    runs = threading.Thread(target=pool.run, name="pool", daemon=True)
    runs.start()
    try:
        members.wait_landed(members.docs, 180)
        status = pool.status()
        assert status["x.yaml"]["phase"] == "Invalid", status
        assert "metadata.namespace" in status["x.yaml"]["message"], status
        assert {status[members.key(n)]["phase"] for n in members.docs} == {"Running"}, status

        _fail_and_resume(pool, members, "c")
        written = _rows_written(pool)  # c's since its restart, as a new process's would be
        assert set(written) == {members.key(n) for n in members.docs}, written
        assert all(rows > 0 for rows in written.values()), written

        # b removed: it stops; a changed: it restarts; c runs on through both.
        a_runner = pool.members[members.key("a")].runner
        (members.folder / "b.yaml").unlink()
        members.docs["a"]["spec"]["trigger"] = {"interval": "2s"}
        members.write("a")
        wait_for(lambda: members.key("b") not in pool.status(), 120, "member b stopped")
        wait_for(
            lambda: (
                (member := pool.members.get(members.key("a"))) is not None
                and member.runner is not a_runner
            ),
            120,
            "member a restarted on its new spec",
        )
        members.produce(members.docs, 500, 100)
        members.wait_landed(["a", "c"], 120)
    finally:
        stop.set()
        runs.join(120)
    assert not runs.is_alive(), "the pool did not stop"
    # Every record exactly once; b's last ones unread (it was removed before them).
    for name in ("a", "c"):
        assert {s.tpo for s in members.sent[name]} == _landed(members.docs[name])
    assert {s.tpo for s in members.sent["b"][:500]} == _landed(members.docs["b"])
