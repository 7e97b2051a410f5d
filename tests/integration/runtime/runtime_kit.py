"""Helpers for the data-plane tests: topics, producing with known offsets, manifests, readers.

Everything here talks to the real broker and reads tables with the independent ``deltalake``
reader (and Spark where a test says so); nothing is mocked.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from deltaflow_api import DeltaIngestion
from deltaflow_runtime.config import Pipeline
from devstack.process import record_pid

# (topic, partition, offset): how every check matches records.
Tpo = tuple[str, int, int]


def unique(prefix: str) -> str:
    """A fresh name (topics and streams never collide between tests)."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(
    bootstrap: str, name: str, partitions: int, config: Mapping[str, str] | None = None
) -> None:
    """Create a topic and wait until it exists."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(
        name, num_partitions=partitions, replication_factor=1, config=dict(config or {})
    )
    admin.create_topics([topic])[name].result(timeout=30)


@dataclass(frozen=True)
class Sent:
    """One produced record and where Kafka put it."""

    tpo: Tpo
    key: bytes | None
    value: bytes | None


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[tuple[bytes | None, bytes | None]],
    partition: int | None = None,
) -> list[Sent]:
    """Produce (key, value) records; return each with its (topic, partition, offset)."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.max.bytes": 4_000_000,
        }
    )
    sent: list[Sent] = []
    errors: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            sent.append(Sent((msg.topic(), msg.partition(), msg.offset()), msg.key(), msg.value()))

    for i, (key, value) in enumerate(records):
        kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": delivered}
        if partition is not None:
            kwargs["partition"] = partition
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0, "some records were not acknowledged"
    assert not errors, errors[:5]
    return sent


def produce_transactions(
    bootstrap: str,
    topic: str,
    transactions: Iterable[tuple[list[tuple[bytes | None, bytes | None]], bool]],
) -> tuple[list[Sent], list[Sent]]:
    """Produce each (records, commit) as one Kafka transaction, committed or aborted after its
    records are in the log (an aborted record has an offset, as after a producer's retry).
    Returns the committed records and the aborted ones, each with its (topic, partition, offset).
    """
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": unique("txn"), "linger.ms": 5}
    )
    producer.init_transactions(30)
    committed: list[Sent] = []
    aborted: list[Sent] = []
    errors: list[str] = []
    for records, commit in transactions:
        sent: list[Sent] = []

        def delivered(err: Any, msg: Any, sent: list[Sent] = sent) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                sent.append(
                    Sent((msg.topic(), msg.partition(), msg.offset()), msg.key(), msg.value())
                )

        producer.begin_transaction()
        for key, value in records:
            producer.produce(topic, key=key, value=value, on_delivery=delivered)
        assert producer.flush(60) == 0, "some records were not acknowledged"
        if commit:
            producer.commit_transaction(30)
            committed.extend(sent)
        else:
            producer.abort_transaction(30)
            aborted.extend(sent)
    assert not errors, errors[:5]
    return committed, aborted


def order(i: int, country: str = "DE") -> bytes:
    """A valid order for the tests' schema."""
    return json.dumps(
        {"id": i, "amount": round(i * 0.5, 2), "ts": "2026-11-22T12:00:00Z", "country": country}
    ).encode()


ORDER_SCHEMA = "id BIGINT NOT NULL, amount DOUBLE, ts TIMESTAMP, country STRING"


def manifest(
    name: str,
    topic: str,
    bootstrap: str,
    root: Path,
    *,
    format_: Mapping[str, Any] | None = None,
    source: Mapping[str, Any] | None = None,
    sink: Mapping[str, Any] | None = None,
    spec: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A DeltaIngestion manifest writing under ``root``."""
    return {
        "apiVersion": "deltaflow.io/v1alpha1",
        "kind": "DeltaIngestion",
        "metadata": {"name": name, "namespace": "test"},
        "spec": {
            "source": {"bootstrapServers": bootstrap, "topic": topic, **(source or {})},
            "format": dict(format_ or {"type": "json", "schema": ORDER_SCHEMA}),
            "sink": {"tablePath": str(root / "tables" / name), **(sink or {})},
            "trigger": {"interval": "1s"},
            **(spec or {}),
        },
    }


def example_on_topic(example: Path, topic: str, folder: Path) -> Path:
    """The example manifest unchanged but for its topic (each test its own: a topic, and the
    consumer group named after the stream, shared with another test would make the result
    depend on which ran first)."""
    document = yaml.safe_load(example.read_text())
    document["spec"]["source"]["topic"] = topic
    path = folder / f"{example.stem}-{topic}.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def pipeline(document: Mapping[str, Any]) -> Pipeline:
    """Validate a manifest into a pipeline (as the runtime does)."""
    return Pipeline.of(DeltaIngestion.model_validate(dict(document)))


def ages_at_commit(path: str, since: float = 0.0, *, after_version: int = -1) -> list[float]:
    """Each row's age when the Delta commit that added it happened (seconds), from the table
    alone: the rows new in each version, against that version's commit timestamp (of commits
    at ``since`` or later, and of versions after ``after_version``). The tests and
    ``bench/trickle.py`` measure freshness with it."""
    from deltalake import DeltaTable

    table = DeltaTable(path)
    committed_at = {h["version"]: h["timestamp"] / 1000 for h in table.history()}
    ages: list[float] = []
    seen: set[tuple[int, int]] = set()
    for version in sorted(committed_at):
        rows = DeltaTable(path, version=version).to_pyarrow_table(
            columns=["_kafka_partition", "_kafka_offset", "_kafka_timestamp"]
        )
        for partition, offset, stamp in zip(
            rows.column("_kafka_partition").to_pylist(),
            rows.column("_kafka_offset").to_pylist(),
            rows.column("_kafka_timestamp").to_pylist(),
            strict=True,
        ):
            if (partition, offset) not in seen:
                seen.add((partition, offset))
                if committed_at[version] >= since and version > after_version:
                    ages.append(committed_at[version] - stamp.timestamp())
    return ages


def read_table(path: str, storage_options: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """All rows of a Delta table, read with deltalake (delta-rs), an independent reader (from an
    object store with ``storage_options``)."""
    from deltalake import DeltaTable

    rows: list[dict[str, Any]] = (
        DeltaTable(path, storage_options=storage_options).to_pyarrow_table().to_pylist()
    )
    return rows


DELTAFLOW = str(Path(sys.executable).parent / "deltaflow")


def run_cli(
    args: list[str], cwd: Path, timeout: float, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the ``deltaflow`` console script to its end (killed, and the test failed, on timeout);
    ``env`` is added to this process's environment."""
    proc = subprocess.Popen(
        [DELTAFLOW, *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, **env} if env else None,
    )
    record_pid(proc.pid)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        ran = f"deltaflow {' '.join(args)} ran over {timeout}s"
        raise AssertionError(f"{ran}:\n{out}\n{err}") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def tpos(rows: Iterable[Mapping[str, Any]]) -> list[Tpo]:
    """The (topic, partition, offset) of each row."""
    return [(r["_kafka_topic"], int(r["_kafka_partition"]), int(r["_kafka_offset"])) for r in rows]


def duplicates(keys: Iterable[Tpo]) -> list[Tpo]:
    """Keys that occur more than once."""
    return [k for k, n in Counter(keys).items() if n > 1]


def wait_for(predicate: Any, timeout: float, what: str, interval: float = 0.5) -> Any:
    """Poll until ``predicate()`` is truthy and return what it gave, or fail saying what did
    not happen."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def log_end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """The log-end offset of each partition."""
    from deltaflow_runtime.offsets import KafkaAdmin

    admin = KafkaAdmin({"bootstrap.servers": bootstrap})
    latest = admin.latest_offsets(admin.partitions([topic]))
    return latest.get(topic, {})
