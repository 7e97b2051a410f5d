"""The crash harness: a real driver process (``python -m deltaflow_runtime stream``) SIGKILLed again
and again while records are produced, restarted from the same checkpoint each time.

Used by the CI test (small volume) and by ``bench/crash_soak.py`` (>= 1M records). Kills land at a
random moment, while a batch's data files are being written (before its Delta commit), right after
the table's commit file appears (before the dead-letter commit and the checkpoint's commit), and
right after Spark planned a batch. Afterwards one last run drains Kafka and every produced record
is looked up by (topic, partition, offset) in the table and the dead-letter table.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import Producer

from deltaflow_api.driver_pod import ENV_SPARK_MASTER
from devstack.minio import ObjectStore
from devstack.process import record_pid
from support.node_processes import child_mapped_files

STRATEGIES = ("random", "mid-write", "after-table-commit", "after-plan")

# One record in HOSTILE_EVERY (~1%) is one of these, each refused with its own reason.
HOSTILE_EVERY = 97
HOSTILE: tuple[bytes | None, ...] = (
    b'{"id": 1, "amount": ',  # truncated
    b'{"id": 2} {"id": 3}',  # two objects
    b'{"id": "four"}',  # a string for a BIGINT
    b'{"id": 5, "ts": 1700000000}',  # a number for a TIMESTAMP
    b'{"id": 6, "id": 7}',  # a duplicate key
    b"\xff\xfe{}",  # not UTF-8
    None,  # a tombstone
    b"{}",  # none of the schema's fields
    b'{"id": 8, "amount": 1e-400}',  # a DOUBLE that would underflow to 0
    b'{"id": 9, "ts": "2026-11-22T12:00:00.123456789Z"}',  # nanoseconds Spark would cut
)
# Every TXN_EVERY records, TXN_SIZE more go in one Kafka transaction (hostile ones among them),
# every other one aborted after its records are in the log: none of those may land.
TXN_EVERY = 5000
TXN_SIZE = 20


@dataclass
class Restart:
    """One driver life: started, recovered (first new table commit), killed."""

    number: int
    strategy: str
    recovery_seconds: float
    killed_at_seconds: float
    hit: bool  # the kill landed in the window the strategy aims at
    # after-table-commit: the kill landed before the batch's dead-letter commit (None: other)
    before_dead_letters: bool | None = None


@dataclass
class CrashResult:
    """What the soak found."""

    produced: int
    in_table: int
    in_dead_letter: int
    duplicates: int
    lost: int
    unexpected: int
    # Landed at its (topic, partition, offset) but not as produced: a table row whose id is not
    # the produced record's, a dead letter whose key or value bytes differ.
    mismatched: int = 0
    aborted: int = 0  # records of aborted transactions in the topic
    aborted_landed: int = 0  # ... found in either table
    restarts: list[Restart] = field(default_factory=list)
    final_drain_seconds: float = 0.0
    graceful_stop_seconds: float = 0.0  # SIGTERM -> exit 0, after the final drain
    # SIGTERM while batch N was planned and not committed: N, then the last batch planned and
    # the last marked done after the exit (done >= N: the batch in flight finished; planned is
    # at most one more: a batch Spark planned back to back, which the next start runs).
    sigterm_in_flight: tuple[int, int, int] | None = None

    def summary(self) -> str:
        """Human-readable figures."""
        lines = [
            f"produced {self.produced}, table {self.in_table}, dead letters "
            f"{self.in_dead_letter}, duplicates {self.duplicates}, lost {self.lost}, "
            f"unexpected {self.unexpected}, mismatched {self.mismatched}, aborted "
            f"{self.aborted} (landed "
            f"{self.aborted_landed}), final drain {self.final_drain_seconds:.1f}s, "
            f"graceful stop (SIGTERM -> exit 0) {self.graceful_stop_seconds:.1f}s",
        ]
        for r in self.restarts:
            lines.append(
                f"  restart {r.number:2d}: recovered in {r.recovery_seconds:5.1f}s "
                f"(spawn -> first new table commit), killed {r.strategy}"
                f"{'' if r.hit else ' (window missed: killed on timeout)'} "
                f"{r.killed_at_seconds:5.1f}s after spawn"
                + (
                    ""
                    if r.before_dead_letters is None
                    else " (before the dead-letter commit)"
                    if r.before_dead_letters
                    else " (after the dead-letter commit too)"
                )
            )
        return "\n".join(lines)


def local_spark_args(work: Path) -> list[str]:
    """The Spark settings of a local driver process: local[2], scratch space under ``work``."""
    return [
        "--master",
        "local[2]",
        "--conf",
        f"spark.local.dir={work / 'spark-local'}",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        f"spark.driver.extraJavaOptions=-Dderby.system.home={work / 'derby'}",
    ]


# The variable the operator gives a local-mode driver pod: the runtime then starts its JVM as a
# small stream's (session.LOCAL_MODE_JAVA_OPTIONS, C1 only). The ``--master`` above still wins.
LOCAL_MODE_DRIVER_ENV = {ENV_SPARK_MASTER: "local[1]"}


def stream_argv(config: Path, work: Path, *, available_now: bool, port: int = 0) -> list[str]:
    """``python -m deltaflow_runtime stream`` on a config, run locally."""
    argv = [sys.executable, "-m", "deltaflow_runtime", "stream", "--config", str(config)]
    argv += ["--metrics-port", str(port), *local_spark_args(work)]
    if available_now:
        argv.append("--available-now")
    return argv


class ProcessGroup:
    """A process in its own process group (a driver's JVM goes with it), output to ``log``."""

    def __init__(
        self,
        argv: list[str],
        log: Path,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.started = time.monotonic()
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=cwd,
                env={**os.environ, **env} if env else None,
            )
        record_pid(self.proc.pid)

    def kill(self) -> None:
        """SIGKILL the whole process group: the Python driver and its JVM, no goodbye."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def terminate(self, timeout: float) -> int:
        """SIGTERM the driver process only (what Kubernetes sends a container's main process)
        and wait for its exit code."""
        os.kill(self.proc.pid, signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def alive(self) -> bool:
        """Whether it still runs."""
        return self.proc.poll() is None

    def mapped_files(self) -> set[str]:
        """Files the process's child JVM (PySpark's driver) has mapped; empty without one."""
        return child_mapped_files(self.proc.pid)


class Driver(ProcessGroup):
    """One ``deltaflow stream`` process."""

    def __init__(
        self,
        config: Path,
        work: Path,
        log: Path,
        *,
        available_now: bool = False,
        env: dict[str, str] | None = None,
    ):
        super().__init__(stream_argv(config, work, available_now=available_now), log, env=env)


class TableWatch:
    """Watches a table and the checkpoint where they are stored (what a kill strategy waits for):
    a local folder, or, with ``store``, s3a:// paths listed on the object store itself."""

    def __init__(self, table: str, checkpoint: str, store: ObjectStore | None = None) -> None:
        self.table = table
        self.checkpoint = checkpoint
        self._s3 = store.filesystem() if store is not None else None

    def _names(self, folder: str) -> list[str]:
        if self._s3 is None:
            return os.listdir(folder) if os.path.isdir(folder) else []
        from pyarrow import fs

        selector = fs.FileSelector(_key(folder), allow_not_found=True)
        return [info.base_name for info in self._s3.get_file_info(selector)]

    def version(self) -> int:
        """Latest committed version (-1: no table yet)."""
        names = self._names(f"{self.table}/_delta_log")
        versions = [int(n[:20]) for n in names if n.endswith(".json") and n[:20].isdigit()]
        return max(versions, default=-1)

    def last_batch(self) -> int:
        """The stream's batch id recorded in the latest commit (-1: none, or not the stream's)."""
        version = self.version()
        if version < 0:
            return -1
        path = f"{self.table}/_delta_log/{version:020d}.json"
        if self._s3 is None:
            text = Path(path).read_text()
        else:
            with self._s3.open_input_stream(_key(path)) as stream:
                text = stream.read().decode()
        for line in text.splitlines():
            info = json.loads(line).get("commitInfo")
            if info is not None and info.get("userMetadata"):
                return int(json.loads(info["userMetadata"])["deltaflow"]["batchId"])
        return -1

    def data_files(self) -> set[str]:
        """Every data file stored (committed or not)."""
        if self._s3 is None:
            out: set[str] = set()
            for root, dirs, files in os.walk(self.table):
                dirs[:] = [d for d in dirs if d != "_delta_log"]
                out.update(os.path.join(root, f) for f in files if f.endswith(".parquet"))
            return out
        from pyarrow import fs

        selector = fs.FileSelector(_key(self.table), recursive=True, allow_not_found=True)
        return {
            i.path
            for i in self._s3.get_file_info(selector)
            if i.path.endswith(".parquet") and "/_delta_log/" not in i.path
        }

    def planned(self) -> int:
        """Latest batch Spark planned (-1: none)."""
        names = self._names(f"{self.checkpoint}/offsets")
        return max((int(n) for n in names if n.isdigit()), default=-1)

    def finished(self) -> int:
        """Latest batch Spark marked done in the checkpoint's commits (-1: none). A start
        replays batch N exactly when N is planned and not finished."""
        names = self._names(f"{self.checkpoint}/commits")
        return max((int(n) for n in names if n.isdigit()), default=-1)


def _key(path: str) -> str:
    """``bucket/key`` of an s3a:// path (pyarrow's form)."""
    return path.removeprefix("s3a://").rstrip("/")


def _wait(predicate: Callable[[], bool], timeout: float, poll: float = 0.005) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(poll)
    return False


class BackgroundProducer:
    """Produces at about ``rate``/s until told to stop, and at least ``total`` records: JSON
    orders, ~1% hostile (HOSTILE; none with ``hostile`` False), and every TXN_EVERY records a
    transaction of TXN_SIZE more, every other one aborted (``aborted``: where those records
    are; ``delivered``: the rest)."""

    def __init__(
        self, bootstrap: str, topic: str, total: int, rate: float, *, hostile: bool = True
    ) -> None:
        self.bootstrap, self.topic, self.total, self.rate = bootstrap, topic, total, rate
        self.hostile = hostile
        self.delivered: list[tuple[str, int, int]] = []
        # What each delivered record held: (key, value) by (topic, partition, offset).
        self.payloads: dict[tuple[str, int, int], tuple[bytes | None, bytes | None]] = {}
        self.aborted: list[tuple[str, int, int]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="producer", daemon=True)

    def start(self) -> None:
        """Start producing in the background."""
        self.thread.start()

    def finish(self, timeout: float) -> None:
        """Stop once ``total`` records are out, and wait until every one is acknowledged."""
        self._stop.set()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the producer did not finish"
        assert not self.errors, self.errors[:5]

    def _run(self) -> None:
        producer = Producer(
            {"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "linger.ms": 20}
        )

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                self.errors.append(str(err))
            else:
                tpo = (msg.topic(), msg.partition(), msg.offset())
                self.delivered.append(tpo)
                self.payloads[tpo] = (msg.key(), msg.value())

        countries = ("DE", "FR", "US", "JP")

        def order(i: int) -> bytes:
            return json.dumps(
                {
                    "id": i,
                    "amount": i / 4,
                    "ts": "2026-11-22T12:00:00Z",
                    "country": countries[i % 4],
                }
            ).encode()

        transactional = Producer(
            {"bootstrap.servers": self.bootstrap, "transactional.id": f"soak-{self.topic}"}
        )
        transactional.init_transactions(30)
        started = time.monotonic()
        i = -1
        while i + 1 < self.total or not self._stop.is_set():
            i += 1
            if i % TXN_EVERY == TXN_EVERY - 1:
                self._transaction(transactional, i, order)
            value: bytes | None
            if self.hostile and i % HOSTILE_EVERY == 0:
                value = HOSTILE[(i // HOSTILE_EVERY) % len(HOSTILE)]
            else:
                value = order(i)
            while True:
                try:
                    producer.produce(
                        self.topic, key=str(i).encode(), value=value, on_delivery=delivered
                    )
                    break
                except BufferError:
                    producer.poll(0.05)
            if i % 1000 == 0:
                producer.poll(0)
                ahead = i / self.rate - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)
        producer.flush(120)

    def _transaction(self, producer: Any, i: int, order: Callable[[int], bytes]) -> None:
        """TXN_SIZE records in one transaction (ids past any plain record's), aborted every
        other time once they are in the log, as an exactly-once producer's failed attempt."""
        sent: list[tuple[str, int, int]] = []
        payloads: dict[tuple[str, int, int], tuple[bytes | None, bytes | None]] = {}

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                self.errors.append(str(err))
            else:
                sent.append((msg.topic(), msg.partition(), msg.offset()))
                payloads[sent[-1]] = (msg.key(), msg.value())

        producer.begin_transaction()
        for n in range(TXN_SIZE):
            value = HOSTILE[n % len(HOSTILE)] if n % 5 == 0 else order(10**9 + i * TXN_SIZE + n)
            producer.produce(self.topic, key=b"txn", value=value, on_delivery=delivered)
        producer.flush(60)
        if (i // TXN_EVERY) % 2 == 0:
            producer.abort_transaction(30)
            self.aborted.extend(sent)
        else:
            producer.commit_transaction(30)
            self.delivered.extend(sent)
            self.payloads.update(payloads)


def write_config(
    path: Path,
    name: str,
    topic: str,
    bootstrap: str,
    root: str,
    *,
    max_offsets: int,
    storage: dict[str, Any] | None = None,
) -> tuple[Path, str, str]:
    """The DeltaIngestion the drivers run under ``root`` (a folder or an s3a:// prefix); returns
    (config, table path, checkpoint path)."""
    sink: dict[str, Any] = {"tablePath": f"{root}/lake/{name}", "partitionBy": ["country"]}
    if storage is not None:
        sink["storage"] = storage
    document = {
        "apiVersion": "deltaflow.io/v1alpha1",
        "kind": "DeltaIngestion",
        "metadata": {"name": name, "namespace": "crash"},
        "spec": {
            "source": {
                "bootstrapServers": bootstrap,
                "topic": topic,
                "maxOffsetsPerTrigger": max_offsets,
            },
            "format": {
                "type": "json",
                "schema": "id BIGINT NOT NULL, amount DOUBLE, ts TIMESTAMP, country STRING",
            },
            "sink": sink,
            "trigger": {"interval": "1s"},
        },
    }
    path.write_text(yaml.safe_dump(document))
    return path, f"{root}/lake/{name}", f"{root}/lake/_checkpoints/crash/{name}"


def crash_soak(
    bootstrap: str,
    topic: str,
    work: Path,
    *,
    records: int,
    kills: int,
    rate: float,
    max_offsets: int,
    seed: int = 7,
    say: Callable[[str], None] = print,
    store: ObjectStore | None = None,
    sigterm_mid_batch: bool = True,
    strategies: tuple[str, ...] = STRATEGIES,
    local_mode_jvm: bool = False,
) -> CrashResult:
    """Produce (at least ``records``, and until the last kill) in the background, kill the driver
    ``kills`` times (rotating ``strategies``), SIGTERM a life mid-batch (unless told not to),
    drain, count. ``local_mode_jvm`` starts each driver's JVM as a small stream's pod does (a
    start 3-5 s faster, a drain slower: bench S1/C3). With ``store``,
    the table, the dead-letter table and the checkpoint live on that object store
    (s3a://lake/<topic>/...)."""

    rng = random.Random(seed)
    work.mkdir(parents=True, exist_ok=True)
    root = str(work) if store is None else f"s3a://lake/{topic}"
    config, table, checkpoint = write_config(
        work / "ingestion.yaml",
        "soak",
        topic,
        bootstrap,
        root,
        max_offsets=max_offsets,
        storage=None if store is None else store.storage_spec(),
    )
    env = {
        **(LOCAL_MODE_DRIVER_ENV if local_mode_jvm else {}),
        **({} if store is None else store.env()),
    }
    options = None if store is None else store.storage_options()
    watch = TableWatch(table, checkpoint, store)
    dead_watch = TableWatch(table + "_dead_letter", checkpoint, store)
    poll = 0.002 if store is None else 0.02  # a listing on the object store costs a request
    log = work / "driver.log"
    producer = BackgroundProducer(bootstrap, topic, records, rate)
    producer.start()
    restarts: list[Restart] = []
    driver: Driver | None = None
    try:
        for number in range(1, kills + 1):
            strategy = strategies[(number - 1) % len(strategies)]
            before = watch.version()
            driver = Driver(config, work, log, env=env)
            if not _wait(lambda: watch.version() > before, 300, poll=0.05):  # noqa: B023
                raise AssertionError(f"restart {number}: no commit within 300s (see {log})")
            recovered = time.monotonic() - driver.started
            hit = _kill_window(strategy, watch, rng, poll)
            killed_at = time.monotonic() - driver.started
            assert driver.alive(), f"restart {number}: the driver died by itself (see {log})"
            driver.kill()
            between = None
            if strategy == "after-table-commit" and hit:
                # Every batch holds hostile records, so each has a dead-letter commit after its
                # table commit: did the kill come before the one of the table's last batch?
                between = dead_watch.last_batch() < watch.last_batch()
            restarts.append(Restart(number, strategy, recovered, killed_at, hit, between))
            say(
                f"restart {number}: recovered in {recovered:.1f}s, killed {strategy} "
                f"at {killed_at:.1f}s{'' if hit else ' (window missed)'}"
            )
        driver = None
        # While records still arrive: a life started after production ended may find one
        # batch's worth left, and no batch to stop in the middle of.
        sigterm = (
            _sigterm_mid_batch(Driver(config, work, log, env=env), watch, log, say, poll)
            if sigterm_mid_batch
            else None
        )
        producer.finish(timeout=max(600.0, records / rate * 2))
        # The last life drains Kafka (the consumer group reaches the log end), then stops
        # gracefully: SIGTERM lets the in-flight batch finish and the driver exits 0.
        lives = started_lives(log)
        driver = Driver(config, work, log, env=env)
        drain_seconds, graceful = _drain_and_stop(
            driver, log, lives, lambda: drained(bootstrap, topic, config)
        )
    finally:
        if driver is not None and driver.alive():
            driver.kill()

    result = replace(
        count_landed(table, options, producer.payloads),
        restarts=restarts,
        final_drain_seconds=drain_seconds,
        graceful_stop_seconds=graceful,
    )
    return _with_aborted(result, table, options, producer.aborted, sigterm)


def _drain_and_stop(
    driver: Driver, log: Path, lives_before: int, drained_now: Callable[[], bool]
) -> tuple[float, float]:
    """Wait until ``driver`` (started after ``log`` held ``lives_before`` lives) has drained
    Kafka, SIGTERM it, check it exits 0; returns the seconds it took to drain and to stop."""
    # The life before may have drained Kafka already: wait until this one has its stop handler
    # (a SIGTERM during Python's own start-up kills it before it can answer).
    if not _wait(lambda: started_lives(log) > lives_before, 120, poll=0.2):
        raise AssertionError(f"the final life did not start within 120s (see {log})")
    if not _wait(drained_now, 1800, poll=1.0):
        raise AssertionError(f"the final run did not drain Kafka (see {log})")
    drain_seconds = time.monotonic() - driver.started
    stopping = time.monotonic()
    code = driver.terminate(timeout=120)
    assert code == 0, f"SIGTERM: the driver exited {code} (see {log})"
    return drain_seconds, time.monotonic() - stopping


def started_lives(log: Path) -> int:
    """Driver lives in ``log`` that got as far as their stop handler (cli logs it)."""
    return log.read_text(errors="replace").count("starting the Spark session")


def _sigterm_mid_batch(
    driver: Driver, watch: TableWatch, log: Path, say: Callable[[str], None], poll: float
) -> tuple[int, int, int]:
    """SIGTERM the driver while a batch is in flight (planned, not in the table): it finishes
    that batch, marks it done in the checkpoint and exits 0. Returns (that batch, the last
    planned, the last marked done after the exit)."""
    before = watch.version()

    def in_flight() -> bool:
        return watch.planned() > max(watch.last_batch(), watch.finished())

    try:
        # First this life's own commit: until then a batch planned by the killed life (offsets
        # without commits) looks in flight, and the signal would hit a process still starting.
        if not _wait(lambda: watch.version() > before, 300, poll=0.05):
            raise AssertionError(f"the SIGTERM life committed nothing within 300s (see {log})")
        if not _wait(in_flight, 300, poll):
            raise AssertionError(f"no batch in flight within 300s (see {log})")
        batch = watch.planned()
        code = driver.terminate(timeout=120)
        assert code == 0, f"SIGTERM mid-batch: the driver exited {code} (see {log})"
    finally:
        if driver.alive():
            driver.kill()
    planned, done = watch.planned(), watch.finished()
    say(f"SIGTERM with batch {batch} in flight: planned {planned}, done {done}")
    return batch, planned, done


def _with_aborted(
    result: CrashResult,
    table: str,
    options: dict[str, str] | None,
    aborted: list[tuple[str, int, int]],
    sigterm: tuple[int, int, int] | None,
) -> CrashResult:
    """The result, with how many records of aborted transactions landed in either table."""

    from deltalake import DeltaTable

    columns = ["_kafka_topic", "_kafka_partition", "_kafka_offset"]
    landed: set[tuple[str, int, int]] = set()
    for path in (table, table + "_dead_letter"):
        arrow = DeltaTable(path, storage_options=options).to_pyarrow_table(columns=columns)
        landed.update(zip(*(arrow.column(c).to_pylist() for c in columns), strict=True))
    return replace(
        result,
        aborted=len(aborted),
        aborted_landed=len(landed & set(aborted)),
        sigterm_in_flight=sigterm,
    )


def count_landed(
    table: str,
    options: dict[str, str] | None,
    delivered: dict[tuple[str, int, int], tuple[bytes | None, bytes | None]],
) -> CrashResult:
    """Look every produced record up, by (topic, partition, offset), in the two tables, and
    check that what landed there is what was produced: a row's id is the produced order's, a
    dead letter holds the produced key and value bytes."""
    from deltalake import DeltaTable

    position = ["_kafka_topic", "_kafka_partition", "_kafka_offset"]
    rows = DeltaTable(table, storage_options=options).to_pyarrow_table(columns=[*position, "id"])
    dead = DeltaTable(table + "_dead_letter", storage_options=options).to_pyarrow_table(
        columns=[*position, "key", "value"]
    )

    def landed_as(t: Any, columns: list[str]) -> list[tuple[tuple[str, int, int], tuple[Any, ...]]]:
        values = [t.column(c).to_pylist() for c in [*position, *columns]]
        return [(tuple(v[:3]), tuple(v[3:])) for v in zip(*values, strict=True)]

    table_rows, dead_letters = landed_as(rows, ["id"]), landed_as(dead, ["key", "value"])
    counts = Counter(tpo for tpo, _ in table_rows + dead_letters)
    produced = delivered.keys()
    mismatched = sum(
        1
        for tpo, (row_id,) in table_rows
        if tpo in delivered and row_id != _order_id(delivered[tpo])
    ) + sum(1 for tpo, payload in dead_letters if tpo in delivered and payload != delivered[tpo])
    return CrashResult(
        produced=len(delivered),
        in_table=rows.num_rows,
        in_dead_letter=dead.num_rows,
        duplicates=sum(n - 1 for n in counts.values() if n > 1),
        lost=len(produced - counts.keys()),
        unexpected=len(counts.keys() - produced),
        mismatched=mismatched,
    )


def _order_id(payload: tuple[bytes | None, bytes | None]) -> int | None:
    """The id of the produced order (None: the value was no JSON order, so no row may hold it)."""
    try:
        return int(json.loads(payload[1] or b"")["id"])
    except (ValueError, KeyError, TypeError):
        return None


def drained(bootstrap: str, topic: str, config: Path) -> bool:
    """Whether the stream's consumer group sits at the log end on every partition of ``topic``
    (only that topic: another soak may have used the same group for its own topic)."""
    from deltaflow_runtime.config import Pipeline, load_ingestion
    from deltaflow_runtime.offsets import KafkaAdmin

    group = Pipeline.of(load_ingestion(config)).identity.consumer_group
    admin = KafkaAdmin({"bootstrap.servers": bootstrap})
    latest = admin.latest_offsets(admin.partitions([topic]))
    return bool(latest) and admin.group_offsets(group).get(topic) == latest.get(topic)


def _kill_window(strategy: str, watch: TableWatch, rng: random.Random, poll: float) -> bool:
    """Wait for the moment a strategy aims at; True if it came (else the caller kills anyway)."""
    if strategy == "random":
        time.sleep(rng.uniform(0.1, 4.0))
        return True
    if strategy == "mid-write":
        known = watch.data_files()
        return _wait(lambda: bool(watch.data_files() - known), 60, poll=max(poll, 0.005))
    if strategy == "after-table-commit":
        version = watch.version()
        return _wait(lambda: watch.version() > version, 60, poll=poll)
    planned = watch.planned()
    return _wait(lambda: watch.planned() > planned, 60, poll=poll)
