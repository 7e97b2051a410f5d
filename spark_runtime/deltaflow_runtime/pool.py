"""A stream pool: one driver process (Spark in local mode) running many DeltaIngestions' streams.

Each member is a stream of its own, as in a driver of its own: its StreamRunner, checkpoint,
transaction id, dead-letter table and start-up guards, run on a SparkSession of its own
(``newSession``: its own SQL settings and query manager, so its progress listener hears its own
query only) over the pool's one SparkContext. What is per process is the pool's: the signal
handlers, the metrics endpoint (every member's series, labelled by stream), ``spark.stop()``.

A member that fails restarts alone, after a backoff that grows with its failures in a row, and
says why in its status; the others keep their rhythm. Spark's FAIR scheduler gives each member
a scheduler pool of its own (its batches' jobs share the task threads fairly), and a member
whose spec sets no ``maxOffsetsPerTrigger`` is capped at ``DEFAULT_MAX_OFFSETS_PER_TRIGGER``, so
one member's catch-up comes in batches and cannot hold the threads for minutes.

Membership is a folder of manifests (the operator's ConfigMap, one key per member), read again
every ``rescan_seconds``: a new file starts a member, a removed one stops it gracefully, a
changed one restarts it, an invalid one is reported and never started.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from deltaflow_api.failures import FailureReason
from deltaflow_runtime.config import Pipeline, load_ingestion
from deltaflow_runtime.errors import DeltaflowError, InvalidSpecError, failure_reason
from deltaflow_runtime.metrics import RuntimeMetrics, StreamRegistries
from deltaflow_runtime.session import DEFAULT_CONF, PINNED_CONF
from deltaflow_runtime.sink import SCHEDULER_POOL
from deltaflow_runtime.stream import StreamOptions, StreamRunner, start_checks

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from deltaflow_api import DeltaIngestion
    from deltaflow_api.v1alpha1 import Storage

log = logging.getLogger("deltaflow.pool")

# Spark settings a member may set for itself: SQL session settings. Anything else is the JVM's
# or the SparkContext's, shared by every member (a pool never takes one member's for all).
MEMBER_CONF_PREFIXES = ("spark.sql.", "spark.databricks.delta.")
# A member's backlog is read this many records a batch at most unless its spec says otherwise.
DEFAULT_MAX_OFFSETS_PER_TRIGGER = 200_000
# A failed member starts again after BACKOFF_BASE_SECONDS, doubled per failure in a row, at
# most BACKOFF_MAX_SECONDS (kubelet's CrashLoopBackOff: 10 s doubling to 5 min).
BACKOFF_BASE_SECONDS = 10.0
BACKOFF_MAX_SECONDS = 300.0

Phase = Literal["Starting", "Running", "BackingOff", "Invalid", "Stopped"]


def backoff_seconds(failures: int, base: float = BACKOFF_BASE_SECONDS) -> float:
    """How long a member waits before its next start after ``failures`` failures in a row."""
    if failures <= 0:
        return 0.0
    return min(BACKOFF_MAX_SECONDS, base * 2.0 ** (failures - 1))


def member_key(ingestion: DeltaIngestion) -> str:
    """A member's name in the pool: its namespace and name."""
    return f"{ingestion.namespace}/{ingestion.name}"


def pool_conflicts(ingestion: DeltaIngestion, namespace: str, storage: Storage | None) -> list[str]:
    """Why ``ingestion`` cannot run in a pool of ``namespace`` whose members write with
    ``storage`` (spec.sink.storage); empty when it can. Each names the field and the fix."""
    spec = ingestion.spec
    conflicts: list[str] = []
    if ingestion.namespace != namespace:
        conflicts.append(
            f"metadata.namespace: {ingestion.namespace!r} is not the pool's {namespace!r} (a pool "
            "holds its members' secrets and never mixes namespaces)"
        )
    if spec.sink.storage != storage:
        conflicts.append(
            "spec.sink.storage: differs from the pool's members' (they share one object-store "
            "configuration and its credentials); use the same storage or run the stream "
            "on a driver of its own"
        )
    if spec.source.auth is not None:
        conflicts.append(
            "spec.source.auth: a pooled stream reads Kafka without credentials of its own "
            "(not yet supported in pools); run the stream on a driver of its own"
        )
    for key in sorted(spec.spark_conf):
        if not key.startswith(MEMBER_CONF_PREFIXES):
            conflicts.append(
                f"spec.sparkConf.{key}: a pooled stream shares its pool's JVM and SparkContext; "
                f"only session settings ({', '.join(p + '*' for p in MEMBER_CONF_PREFIXES)}) "
                "are its own; remove it or run the stream on a driver of its own"
            )
    return conflicts


def capped(ingestion: DeltaIngestion) -> DeltaIngestion:
    """The member's ingestion with the pool's per-batch cap when its spec sets none."""
    source = ingestion.spec.source
    if source.max_offsets_per_trigger is not None:
        return ingestion
    source = source.model_copy(update={"max_offsets_per_trigger": DEFAULT_MAX_OFFSETS_PER_TRIGGER})
    spec = ingestion.spec.model_copy(update={"source": source})
    return ingestion.model_copy(update={"spec": spec})


@dataclass
class MemberStatus:
    """What a member's status says (the operator's report of it)."""

    phase: Phase = "Starting"
    failures: int = 0  # in a row; a batch committed after a start resets it
    reason: str | None = None  # of the last failure
    message: str | None = None
    retry_at: float | None = None  # epoch seconds of the next start (BackingOff)
    started_at: float | None = None
    last_batch: int | None = None

    def as_report(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "failures": self.failures,
            "reason": self.reason,
            "message": self.message,
            "retryAt": self.retry_at,
            "startedAt": self.started_at,
            "lastBatch": self.last_batch,
        }


@dataclass
class PoolOptions:
    """How the pool runs its members (beyond their specs)."""

    namespace: str
    rescan_seconds: float = 10.0
    stop_grace_seconds: float = 45.0
    # Kafka poll of each member (lag, retention headroom).
    poll_seconds: float = 5.0
    backoff_base_seconds: float = BACKOFF_BASE_SECONDS
    stop: threading.Event = field(default_factory=threading.Event, compare=False)


class Member:
    """One stream of the pool, in a thread of its own: start, wait, and on failure back off and
    start again, until stopped."""

    def __init__(
        self,
        spark: SparkSession,
        pipeline: Pipeline,
        *,
        source: str,
        digest: str,
        options: PoolOptions,
        on_metrics: Callable[[str, RuntimeMetrics | None], None],
    ) -> None:
        self.key = member_key(pipeline.ingestion)
        self.pipeline = pipeline
        self.source = source
        self.digest = digest
        self.status = MemberStatus()
        self.stop = threading.Event()
        self.runner: StreamRunner | None = None
        self._spark = spark
        self._options = options
        self._on_metrics = on_metrics
        self._lock = threading.Lock()
        self._thread = threading.Thread(
            target=self._run, name=f"deltaflow-member-{self.key}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the member's thread to end; whether it did."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def report(self) -> dict[str, Any]:
        """The member's status, its last batch as its runner knows it."""
        with self._lock:
            runner = self.runner
            last = runner.writer.last_report if runner and runner.writer else None
            if last is not None:  # each start builds its writer: a batch of this start
                self.status.last_batch = last.batch_id
                if self.status.phase == "Running" and last.outcome == "committed":
                    self.status.failures = 0  # the start worked: the failures are over
            return self.status.as_report()

    def _session(self) -> SparkSession:
        """A session of the member's own: its SQL settings, its query manager, its scheduler
        pool (set on this thread: the query's own thread inherits it). One for all the
        member's starts: Spark never lets go of a session's query listener bus."""
        self.session.sparkContext.setLocalProperty(SCHEDULER_POOL, self.key)
        return self.session

    @functools.cached_property
    def session(self) -> SparkSession:
        session = self._spark.newSession()
        # A new session starts from the SparkConf: the data plane's session settings as the
        # pool's session holds them (whoever set them), then the member's own.
        for key in (*DEFAULT_CONF, *PINNED_CONF):
            value = self._spark.conf.get(key, None)
            if value is not None and session.conf.isModifiable(key):
                session.conf.set(key, value)
        for key, value in self.pipeline.ingestion.spec.spark_conf.items():
            if not session.conf.isModifiable(key):
                raise InvalidSpecError(
                    f"spec.sparkConf.{key}: Spark fixes it when the pool's JVM starts, so a "
                    "pooled stream cannot set it; remove it or run the stream on a driver of "
                    "its own"
                )
            session.conf.set(key, value)
        return session

    def _run(self) -> None:
        while not self.stop.is_set():
            with self._lock:
                self.status = replace(
                    self.status, phase="Starting", retry_at=None, started_at=time.time()
                )
            try:
                session = self._session()
                start_checks(session, self.pipeline)
                runner = StreamRunner(
                    session,
                    self.pipeline,
                    StreamOptions(
                        config_hint=self.source,
                        stop=self.stop,
                        poll_seconds=self._options.poll_seconds,
                        stop_grace_seconds=self._options.stop_grace_seconds,
                        scheduler_pool=self.key,
                        report_to_pod=False,
                    ),
                )
                with self._lock:
                    self.runner = runner
                self._on_metrics(self.key, runner.metrics)
                if self.stop.is_set():
                    break
                runner.start()
                with self._lock:
                    self.status.phase = "Running"
                _event("member_started", self.key, failures=self.status.failures)
                runner.wait()
            except Exception as error:
                if self.runner is not None:
                    self.runner.release()  # a start that failed half way leaves nothing behind
                if self.stop.is_set() and not isinstance(error, DeltaflowError):
                    break  # stopped mid-start: what failed is the stop's doing
                self._failed(error)
                self.stop.wait(max(0.0, (self.status.retry_at or 0) - time.time()))
                continue
            if self.stop.is_set():
                break
            # The query ended by itself (not in a pool: only availableNow queries end).
            self._failed(RuntimeError("the query ended without a stop"))
            self.stop.wait(max(0.0, (self.status.retry_at or 0) - time.time()))
        with self._lock:
            self.status.phase = "Stopped"
        _event("member_stopped", self.key)

    def _failed(self, error: Exception) -> None:
        reason = failure_reason(error)
        message = error.message if isinstance(error, DeltaflowError) else f"{error}"
        message = f"{type(error).__name__}: {message}"[:2000]
        with self._lock:
            failures = self.status.failures + 1
            wait = backoff_seconds(failures, self._options.backoff_base_seconds)
            self.status = replace(
                self.status,
                phase="BackingOff",
                failures=failures,
                reason=str(reason),
                message=message,
                retry_at=time.time() + wait,
            )
        log.error("member %s failed (%s), starting again in %.0f s: %s", self.key, reason, wait,
                  message)  # fmt: skip
        _event("member_failed", self.key, reason=str(reason), failures=failures, backoff=wait)


def _event(name: str, key: str, **fields: Any) -> None:
    log.info("%s", json.dumps({"event": name, "member": key, **fields}))


@dataclass(frozen=True)
class Manifest:
    """One member's file as last read: its pipeline, or why it cannot run."""

    path: Path
    digest: str
    pipeline: Pipeline | None
    problem: tuple[FailureReason, str] | None


def read_members(folder: Path, namespace: str, storage: Storage | None) -> dict[str, Manifest]:
    """The member manifests in ``folder`` (``*.yaml``, the ConfigMap's keys), by member key
    (by file name for one that cannot be read). Hidden files (a mounted ConfigMap's ``..data``
    links) are not members."""
    found: dict[str, Manifest] = {}
    for path in sorted(folder.glob("*.yaml")):
        if path.name.startswith("."):
            continue
        try:
            raw = path.read_bytes()
        except OSError:
            continue  # replaced while read: the next scan reads it
        digest = hashlib.sha256(raw).hexdigest()
        try:
            ingestion = load_ingestion(path)
        except DeltaflowError as error:
            found[path.name] = Manifest(path, digest, None, (error.reason, error.message))
            continue
        conflicts = pool_conflicts(ingestion, namespace, storage)
        problem = None
        if conflicts:
            problem = (FailureReason.INVALID_SPEC, "; ".join(conflicts))
        found[member_key(ingestion)] = Manifest(
            path, digest, Pipeline.of(capped(ingestion)), problem
        )
    return found


class StreamPool:
    """The pool's members, kept in line with the folder of manifests until stopped."""

    def __init__(
        self,
        spark: SparkSession,
        folder: Path,
        options: PoolOptions,
        storage: Storage | None = None,
    ) -> None:
        self.spark = spark
        self.folder = folder
        self.options = options
        self.storage = storage
        self.members: dict[str, Member] = {}
        self.invalid: dict[str, MemberStatus] = {}
        self.registries = StreamRegistries()

    def status(self) -> dict[str, dict[str, Any]]:
        """Every member's status by key (invalid manifests by key or file name)."""
        report = {key: member.report() for key, member in self.members.items()}
        report.update({key: status.as_report() for key, status in self.invalid.items()})
        return report

    def scan(self) -> None:
        """Start, stop and restart members as the folder now says."""
        wanted = read_members(self.folder, self.options.namespace, self.storage)
        self._stop_members([k for k in self.members if k not in wanted])
        self.invalid = {}
        for key, manifest in wanted.items():
            running = self.members.get(key)
            if running is not None and running.digest == manifest.digest:
                continue
            if running is not None:
                self._stop_members([key])  # changed: stopped gracefully, then started anew
            if manifest.pipeline is None or manifest.problem is not None:
                reason, message = manifest.problem or (FailureReason.INVALID_SPEC, "invalid")
                self.invalid[key] = MemberStatus(
                    phase="Invalid", reason=str(reason), message=f"{manifest.path.name}: {message}"
                )
                continue
            member = Member(
                self.spark,
                manifest.pipeline,
                source=str(manifest.path),
                digest=manifest.digest,
                options=self.options,
                on_metrics=self.registries.set,
            )
            self.members[key] = member
            member.start()

    def _stop_members(self, keys: list[str]) -> None:
        """Stop these members, together (each after its in-flight batch)."""
        stopping = [self.members.pop(key) for key in keys]
        for member in stopping:
            member.stop.set()
        for member in stopping:
            if not member.join(self.options.stop_grace_seconds + 30):
                log.warning("member %s did not stop in time", member.key)
            self.registries.set(member.key, None)

    def run(self) -> None:
        """Keep the members in line with the folder until the pool's stop; then stop them all
        (each after its in-flight batch, in parallel)."""
        stop = self.options.stop
        while not stop.is_set():
            try:
                self.scan()
            except Exception:  # a scan that fails leaves the members as they are
                log.exception("reading the pool's members failed")
            stop.wait(self.options.rescan_seconds)
        self._stop_members(list(self.members))


def check_folder(folder: Path) -> None:
    """Refuse a members folder that does not exist."""
    if not folder.is_dir():
        raise InvalidSpecError(f"--members {folder}: no such folder of member manifests")


def pool_storage(folder: Path, namespace: str) -> Storage | None:
    """The object store the pool's session is made for: its first valid member's in the
    namespace (the operator pools only members with the same one; another member is refused,
    see pool_conflicts)."""
    for manifest in read_members(folder, namespace, None).values():
        if manifest.pipeline is not None:
            ingestion = manifest.pipeline.ingestion
            if ingestion.namespace == namespace:
                return ingestion.spec.sink.storage
    return None
