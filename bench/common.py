"""Shared pieces of the benchmarks: a broker, fast producing, manifests, and CPU accounting of a
driver process tree (Python + its Spark JVM) read from /proc.

The benchmarks run on the local stack (devstack), like the tests, and print their figures.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
for extra in (REPO / "stack", REPO / "tests" / "integration" / "runtime"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

import yaml  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402
from confluent_kafka.cimpl import NewTopic  # noqa: E402
from crash_kit import ProcessGroup, local_spark_args, stream_argv  # noqa: E402

SCHEMA = (
    "id BIGINT, amount DOUBLE, ts TIMESTAMP, country STRING, customer STRING, sku STRING, "
    "note STRING"
)
COUNTRIES = ("DE", "FR", "US", "JP")
_TEMPLATE = (
    '{"id":%d,"amount":%d.%02d,"ts":"2026-11-22T12:00:00Z","country":"%s",'
    '"customer":"customer-%08d","sku":"sku-%06d","note":"%s"}'
)
_NOTE = "x" * 150  # ~300-byte records


def record_value(i: int) -> bytes:
    """One ~300-byte JSON order."""
    text = _TEMPLATE % (i, i % 1000, i % 100, COUNTRIES[i % 4], i % 10**8, i % 10**6, _NOTE)
    return text.encode()


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Create a topic and wait for it."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[
        topic
    ].result(timeout=30)


# Bad records for --bad-percent: a truncated object, a value that does not fit the schema, an
# object followed by more data (each refused by the runtime with its own reason).
_BAD = (b'{"id": 1, "amount": ', b'{"id": "not a number"}', b'{"id": 2} {"id": 3}')


def is_bad(i: int, bad_percent: float) -> bool:
    """Whether record ``i`` is a bad one, spread evenly (a multiplicative hash, not runs)."""
    return (i * 2654435761) % 100_000 < bad_percent * 1000


def bad_count(count: int, bad_percent: float) -> int:
    """How many of records 0..count-1 are bad."""
    return sum(1 for i in range(count) if is_bad(i, bad_percent)) if bad_percent else 0


def produce(
    bootstrap: str,
    topic: str,
    count: int,
    *,
    start: int = 0,
    rate: float = 0,
    bad_percent: float = 0,
) -> float:
    """Produce ``count`` records (as fast as possible, or at ``rate``/s), ``bad_percent`` of them
    bad; returns seconds."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 50,
            "batch.size": 1_000_000,
            "compression.type": "lz4",
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    began = time.monotonic()
    # Pace every ~0.1 s worth of records (every record at a trickle), not in bursts of 1000.
    every = max(1, min(1000, int(rate / 10))) if rate else 1000
    for n in range(count):
        i = start + n
        while True:
            try:
                value = _BAD[i % 3] if bad_percent and is_bad(i, bad_percent) else record_value(i)
                producer.produce(topic, key=str(i).encode(), value=value)
                break
            except BufferError:
                producer.poll(0.05)
        if n % every == 0:
            producer.poll(0)
            if rate:
                ahead = n / rate - (time.monotonic() - began)
                if ahead > 0:
                    time.sleep(ahead)
    producer.flush(300)
    return time.monotonic() - began


@dataclass
class Lake:
    """Where a benchmark's tables go: a local folder, or (``--object-store``) the bucket ``lake``
    of a MinIO server the benchmark starts on loopback, written through s3a://."""

    root: str
    store: Any = None  # devstack.minio.ObjectStore when on the object store

    @property
    def kind(self) -> str:
        """'object store (MinIO, s3a://)' or 'local disk', for the printed figures."""
        return "object store (MinIO, s3a://)" if self.store is not None else "local disk"

    @property
    def env(self) -> dict[str, str] | None:
        """What a job's process needs in its environment (the store's keys)."""
        return None if self.store is None else dict(self.store.env())

    @property
    def options(self) -> dict[str, str] | None:
        """deltalake's storage options for the tables."""
        return None if self.store is None else dict(self.store.storage_options())

    def filesystem(self) -> tuple[Any, str]:
        """(pyarrow filesystem, path of the root in it), to read a table's files directly."""
        if self.store is None:
            from pyarrow import fs

            return fs.LocalFileSystem(), self.root
        return self.store.filesystem(), self.root.removeprefix("s3a://")

    def locate(self, path: str) -> tuple[Any, str]:
        """(pyarrow filesystem, the path in it) of a path under the lake (a table, a checkpoint)."""
        files, root = self.filesystem()
        return files, f"{root}/{path.removeprefix(self.root).strip('/')}"

    def stop(self) -> None:
        """Stop the object store, if one was started."""
        if self.store is not None:
            self.store.stop()


def lake(work: Path, object_store: bool) -> Lake:
    """A local lake under ``work``, or a fresh MinIO with the bucket ``lake``."""
    if not object_store:
        return Lake(str(work))
    from devstack.minio import start_minio

    store = start_minio(work / "minio")
    store.create_bucket("lake")
    return Lake("s3a://lake/bench", store)


def write_manifest(
    path: Path,
    name: str,
    topic: str,
    bootstrap: str,
    where: Lake,
    *,
    max_offsets: int,
    trigger: str | None,
    optimize_write: bool | None = None,
    spark_conf: dict[str, str] | None = None,
    freshness: int | None = None,
) -> str:
    """The DeltaIngestion both jobs run; returns the table's path. ``trigger`` None: the
    interval follows ``freshness`` (spec.freshness.targetSeconds, else its default)."""
    table = f"{where.root}/lake/{name}"
    sink: dict[str, Any] = {"tablePath": table, "partitionBy": ["country"]}
    if optimize_write is not None:
        sink["optimizeWrite"] = optimize_write
    if where.store is not None:
        sink["storage"] = where.store.storage_spec()
    document: dict[str, Any] = {
        "apiVersion": "deltaflow.io/v1alpha1",
        "kind": "DeltaIngestion",
        "metadata": {"name": name, "namespace": "bench"},
        "spec": {
            "source": {
                "bootstrapServers": bootstrap,
                "topic": topic,
                "maxOffsetsPerTrigger": max_offsets,
            },
            "format": {"type": "json", "schema": SCHEMA},
            "sink": sink,
        },
    }
    if trigger is not None:
        document["spec"]["trigger"] = {"interval": trigger}
    if freshness is not None:
        document["spec"]["freshness"] = {"targetSeconds": freshness}
    if spark_conf:
        document["spec"]["sparkConf"] = spark_conf
    path.write_text(yaml.safe_dump(document))
    return table


def spark_args(work: Path) -> list[str]:
    """The Spark settings both jobs get on top of the runtime's (identical for both)."""
    return [*local_spark_args(work), "--conf", "spark.driver.memory=2g"]


_TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ProcessCpu:
    """One process's parent, process group and CPU seconds (user + system), from /proc."""

    ppid: int
    pgrp: int
    seconds: float


def processes() -> dict[int, ProcessCpu]:
    """Every process now running, by pid."""
    found: dict[int, ProcessCpu] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # after "pid (comm)": state ppid pgrp session ... utime(11) stime(12) (0-based)
        seconds = (int(fields[11]) + int(fields[12])) / _TICK
        found[int(entry)] = ProcessCpu(int(fields[1]), int(fields[2]), seconds)
    return found


def json_parse_spec(spark: Any, schema: str) -> Any:
    """The runtime's ParseSpec of a JSON format with ``schema`` (Spark DDL)."""
    from deltaflow_api.v1alpha1 import DeltaSink, Format
    from deltaflow_runtime.parse import parse_spec

    return parse_spec(
        spark,
        Format.model_validate({"type": "json", "schema": schema}),
        DeltaSink.model_validate({"tablePath": "/tmp/unused"}),
    )


class CpuSampler:
    """CPU seconds (user + system) of every process in a process group, sampled from /proc.

    Keeps each pid's highest reading, so the total survives processes exiting; what a process
    burns in its last sampling interval (``interval``) is missed.
    """

    def __init__(self, pgid: int, interval: float = 0.1) -> None:
        self.pgid, self.interval = pgid, interval
        self.per_pid: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        for pid, process in processes().items():
            if process.pgrp == self.pgid:
                self.per_pid[pid] = max(self.per_pid.get(pid, 0.0), process.seconds)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            time.sleep(self.interval)

    def current(self) -> float:
        """CPU seconds so far."""
        self._sample()
        return sum(self.per_pid.values())

    def stop(self) -> float:
        """Stop sampling; total CPU seconds."""
        self._sample()
        self._stop.set()
        self._thread.join()
        return sum(self.per_pid.values())


@dataclass
class Run:
    """One job process: exit code, wall seconds, CPU seconds (all, and the Python driver's)."""

    code: int
    wall: float
    cpu: float
    python_cpu: float = 0.0


class Job(ProcessGroup):
    """A job process in its own group, with CPU accounting."""

    def __init__(self, argv: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        super().__init__(argv, log, cwd=REPO, env=env)
        self.cpu = CpuSampler(self.proc.pid)

    def wait(self, timeout: float) -> Run:
        """Wait for the exit (SIGKILL the group after ``timeout``)."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            code = -9
        cpu = self.cpu.stop()
        python_cpu = self.cpu.per_pid.get(self.proc.pid, 0.0)
        return Run(code, time.monotonic() - self.started, cpu, python_cpu)

    def stop(self, timeout: float = 120) -> Run:
        """SIGTERM to the driver only, as Kubernetes does to a container's main process (the
        runtime stops after the in-flight batch), then wait."""
        os.kill(self.proc.pid, signal.SIGTERM)
        return self.wait(timeout)


def deltaflow_job(
    config: Path,
    work: Path,
    log: Path,
    *,
    available_now: bool,
    port: int = 0,
    env: dict[str, str] | None = None,
) -> Job:
    """``python -m deltaflow_runtime stream`` on a config."""
    argv = stream_argv(config, work, available_now=available_now, port=port)
    return Job([*argv, "--conf", "spark.driver.memory=2g"], log, env)


def baseline_job(
    config: Path,
    work: Path,
    log: Path,
    *,
    available_now: bool,
    validate: bool = False,
    env: dict[str, str] | None = None,
    interval: float | None = None,
) -> Job:
    """The minimal hand-written job (bench/baseline_job.py) on the same config; ``validate``
    adds the runtime's validity checks to it."""
    argv = [sys.executable, str(REPO / "bench" / "baseline_job.py"), "--config", str(config)]
    argv += spark_args(work)
    if available_now:
        argv.append("--available-now")
    if validate:
        argv.append("--validate")
    if interval is not None:
        argv += ["--interval", str(interval)]
    return Job(argv, log, env)


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100), nearest rank."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


def conclude(ok: bool, held: str, work: Path, given: Path | None) -> int:
    """Print the run's RESULT line (``held`` when ``ok``), remove the work folder of a run that
    held unless it was given (``--work``), and return the exit code."""
    print("RESULT:", held if ok else "FAILED")
    if given is None and ok:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


def work_dir(given: Path | None, prefix: str) -> Path:
    """The run's working directory: ``--work`` if given (it must be new or empty: a previous
    run's broker, tables and checkpoints would mix with this one's), else a new temporary one."""
    if given is None:
        return Path(tempfile.mkdtemp(prefix=prefix))
    if given.exists() and any(given.iterdir()):
        raise SystemExit(
            f"--work {given} holds a previous run (its broker, tables and checkpoints would mix "
            "with this one's): remove it or name a new directory"
        )
    given.mkdir(parents=True, exist_ok=True)
    return given


def local_session(cores: int, conf: dict[str, str] | None = None) -> Any:
    """A local[cores] SparkSession with the cached Delta and Kafka jars (bench/run.sh resolved
    them) and ``conf``; Spark's own log at ERROR."""
    from pyspark.sql import SparkSession

    from devstack.spark import spark_jars

    builder = (
        SparkSession.builder.master(f"local[{cores}]")
        .config("spark.jars", ",".join(str(j) for j in spark_jars()))
        .config("spark.ui.enabled", "false")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def broker(work: Path) -> Any:
    """Start a KRaft broker for the benchmark (stop it with .stop())."""
    from devstack.kafka import start_kafka

    return start_kafka(work / "kafka")
