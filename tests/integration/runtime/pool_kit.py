"""A ``deltaflow pool`` process's members in a test: their manifests in a folder (as the
operator's ConfigMap mounts them), what was produced to each, the pool's member events and
what landed in each member's tables."""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from crash_kit import LOCAL_MODE_DRIVER_ENV, ProcessGroup, local_spark_args
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

if TYPE_CHECKING:
    from runtime_kit import Sent

NAMESPACE = "test"  # runtime_kit.manifest's


def records(start: int, count: int) -> list[tuple[bytes | None, bytes | None]]:
    """Orders, one in ten of them not JSON (a dead letter)."""
    return [(b"%d" % i, b"{" if i % 10 == 3 else order(i)) for i in range(start, start + count)]


def landed(document: dict[str, Any]) -> set[tuple[str, int, int]]:
    """(topic, partition, offset) of every row of the member's table and dead-letter table;
    fails on a duplicate."""
    ident = pipeline(document).identity
    keys: list[tuple[str, int, int]] = []
    for path in (ident.table_path, ident.dead_letter_table_path):
        if any((Path(path) / "_delta_log").glob("*.json")):  # its first commit is in
            keys += tpos(read_table(path))
    assert not duplicates(keys), duplicates(keys)[:5]
    return set(keys)


@dataclass
class Pool:
    """The members' manifests, what was produced to each, and the pool process's log."""

    bootstrap: str
    folder: Path
    log: Path
    docs: dict[str, dict[str, Any]] = field(default_factory=dict)
    sent: dict[str, list[Sent]] = field(default_factory=dict)

    def key(self, name: str) -> str:
        return f"{NAMESPACE}/{self.docs[name]['metadata']['name']}"

    def add(
        self, name: str, root: Path, *, auth: dict[str, Any] | None = None, listener: str = ""
    ) -> None:
        """A member reading a new topic of two partitions: with ``auth``, over ``listener``
        (the records are produced over the pool's ``bootstrap``, as the super user)."""
        topic = unique(f"pool-{name}")
        create_topic(self.bootstrap, topic, partitions=2)
        document = manifest(unique(f"pool-{name}"), topic, listener or self.bootstrap, root)
        if auth is not None:
            document["spec"]["source"]["auth"] = copy.deepcopy(auth)
        self.docs[name] = document
        self.write(name)
        self.sent[name] = []

    def report(self, path: Path, name: str) -> dict[str, Any]:
        """Member ``name``'s entry in the pool's last report file ({} before one has it)."""
        report = json.loads(path.read_text()) if path.exists() else {}
        members: dict[str, Any] = report.get("members", {})
        return dict(members.get(self.key(name), {}))

    def write(self, name: str) -> None:
        (self.folder / f"{name}.yaml").write_text(yaml.safe_dump(self.docs[name]))

    def produce(self, names: Iterable[str], start: int, count: int) -> None:
        for name in names:
            topic = self.docs[name]["spec"]["source"]["topic"]
            self.sent[name] += produce(self.bootstrap, topic, records(start, count))

    def wait_landed(self, names: Iterable[str], timeout: float) -> None:
        for name in names:
            try:
                wait_for(
                    lambda n=name: {s.tpo for s in self.sent[n]} <= landed(self.docs[n]),
                    timeout,
                    f"member {name}'s records landed",
                )
            except AssertionError as error:
                raise AssertionError(f"{error}; the pool said: {self.events()[-8:]}") from None

    def events(self, event: str | None = None, member: str | None = None) -> list[dict[str, Any]]:
        """The pool's member events (``member_started``, ``member_failed``, ...), in order."""
        found = []
        for line in self.log.read_text(errors="replace").splitlines():
            if '{"event": "member_' in line:
                entry = json.loads(line[line.index("{") :])
                if (event is None or entry["event"] == event) and (
                    member is None or entry["member"] == member
                ):
                    found.append(entry)
        return found


def start_pool(
    pool: Pool,
    work: Path,
    *,
    report: Path,
    metrics_port: int = 0,
    env: Mapping[str, str] | None = None,
) -> ProcessGroup:
    """``deltaflow pool`` on the pool's folder, as its pod runs it (a rescan every 2 s, a 3 s
    first backoff), writing its report to ``report``; ``env`` on top of a local driver's."""
    argv = [sys.executable, "-m", "deltaflow_runtime", "pool", "--members", str(pool.folder)]
    argv += ["--namespace", NAMESPACE, "--metrics-port", str(metrics_port)]
    argv += ["--rescan-seconds", "2", "--restart-backoff-seconds", "3"]
    argv += ["--report-file", str(report)]
    return ProcessGroup(
        [*argv, *local_spark_args(work)], pool.log, env={**LOCAL_MODE_DRIVER_ENV, **(env or {})}
    )
