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

from deltaflow_api.failures import FailureReason, restart_helps
from deltaflow_api.v1alpha1 import POOL_MEMBER_CONF_PREFIXES, pool_member_conf_key
from deltaflow_runtime.config import (
    ConfigError,
    Pipeline,
    check_paths_outlive_the_pod,
    ingestion_from_text,
)
from deltaflow_runtime.cost import LoadMeter, install_pool_task_time, pool_busy_seconds
from deltaflow_runtime.errors import DeltaflowError, InvalidSpecError, failure_reason
from deltaflow_runtime.jvm import scala_context
from deltaflow_runtime.kafka_auth import KafkaMaterial
from deltaflow_runtime.kafka_preflight import check_kafka
from deltaflow_runtime.metrics import RuntimeMetrics, StreamRegistries
from deltaflow_runtime.session import DEFAULT_CONF, PINNED_CONF
from deltaflow_runtime.sink import SCHEDULER_POOL
from deltaflow_runtime.stream import (
    LOG_CHECKPOINT_WAIT_SECONDS,
    POLLER_JOIN_SECONDS,
    StreamOptions,
    StreamRunner,
    start_checks,
)
from deltaflow_runtime.table import await_log_checkpoints
from deltaflow_runtime.topics import check_topic_pattern

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from deltaflow_api import DeltaIngestion
    from deltaflow_api.v1alpha1 import KafkaAuth, Storage, Volume

log = logging.getLogger("deltaflow.pool")

# A member's backlog is read this many records a batch at most unless its spec says otherwise.
DEFAULT_MAX_OFFSETS_PER_TRIGGER = 200_000
# A failed member starts again after BACKOFF_BASE_SECONDS, doubled per failure in a row, at
# most BACKOFF_MAX_SECONDS (kubelet's CrashLoopBackOff: 10 s doubling to 5 min).
BACKOFF_BASE_SECONDS = 10.0
BACKOFF_MAX_SECONDS = 300.0

# A run this long ends a run of failures: the next failure counts as the first (kubelet resets
# CrashLoopBackOff after 10 minutes of running).
STABLE_RUN_SECONDS = 600.0
# Starting, Running; BackingOff (failed, starts again at retryAt); NeedsAction (failed in a way
# a restart cannot fix: waits for its manifest to change); Invalid (its manifest cannot run
# here, never started); Stopped.
Phase = Literal["Starting", "Running", "BackingOff", "NeedsAction", "Invalid", "Stopped"]


def backoff_seconds(failures: int, base: float = BACKOFF_BASE_SECONDS) -> float:
    """How long a member waits before its next start after ``failures`` failures in a row."""
    if failures <= 0:
        return 0.0
    return min(BACKOFF_MAX_SECONDS, base * 2.0 ** (failures - 1))


def failures_in_a_row(failures: int, started_at: float | None, now: float) -> int:
    """The failures in a row of a member that has run since ``started_at``: none once that run
    has lasted ``STABLE_RUN_SECONDS`` (a failure after it is the first of a new row)."""
    if started_at is not None and now - started_at >= STABLE_RUN_SECONDS:
        return 0
    return failures


def member_key(ingestion: DeltaIngestion) -> str:
    """A member's name in the pool: its namespace and name."""
    return f"{ingestion.namespace}/{ingestion.name}"


@dataclass(frozen=True)
class Shared:
    """What the pool's pod carries for every member (the operator groups members by it:
    builders.pool.group_of): the object store's configuration and keys, the Kafka credentials'
    Secret references (mounted at fixed paths, so a member naming other Secrets would read these)
    and the volumes. The pool's first valid member sets it; a member that differs is refused,
    never run with what another member holds."""

    storage: Storage | None = None
    auth: KafkaAuth | None = None
    volumes: tuple[Volume, ...] = ()

    @classmethod
    def of(cls, ingestion: DeltaIngestion) -> Shared:
        spec = ingestion.spec
        return cls(spec.sink.storage, spec.source.auth, tuple(spec.volumes))


_SHARED_FIELDS = (
    ("storage", "spec.sink.storage", "the object-store configuration and its credentials"),
    ("auth", "spec.source.auth", "the Kafka credentials (the Secret files its pod mounts)"),
    ("volumes", "spec.volumes", "the volumes its pod mounts"),
)


def pool_conflicts(ingestion: DeltaIngestion, namespace: str, shared: Shared) -> list[str]:
    """Why ``ingestion`` cannot run in a pool of ``namespace`` whose pod carries ``shared``;
    empty when it can. Each names the field and the fix."""
    spec = ingestion.spec
    conflicts: list[str] = []
    if ingestion.namespace != namespace:
        conflicts.append(
            f"metadata.namespace: {ingestion.namespace!r} is not the pool's {namespace!r} (a pool "
            "holds its members' secrets and never mixes namespaces)"
        )
    own = Shared.of(ingestion)
    for attribute, field_name, what in _SHARED_FIELDS:
        if getattr(own, attribute) != getattr(shared, attribute):
            conflicts.append(
                f"{field_name}: differs from the pool's members' (they share {what}); use the "
                "same or run the stream on a driver of its own"
            )
    for key in sorted(spec.spark_conf):
        if not key.startswith(POOL_MEMBER_CONF_PREFIXES):
            conflicts.append(
                f"spec.sparkConf.{key}: a pooled stream shares its pool's JVM and SparkContext; "
                f"only session settings ({', '.join(p + '*' for p in POOL_MEMBER_CONF_PREFIXES)}) "
                "are its own; remove it or run the stream on a driver of its own"
            )
        elif not pool_member_conf_key(key):
            conflicts.append(
                f"spec.sparkConf.{key}: Spark fixes it when the pool's JVM starts, so a pooled "
                "stream cannot set it; remove it or run the stream on a driver of its own"
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
    failures: int = 0  # in a row (see failures_in_a_row)
    reason: str | None = None  # of the last failure
    message: str | None = None
    retry_at: float | None = None  # epoch seconds of the next start (BackingOff)
    started_at: float | None = None
    last_batch: int | None = None

    def as_report(self, now: float) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "failures": failures_in_a_row(self.failures, self.started_at, now)
            if self.phase == "Running"
            else self.failures,
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
    # Kafka poll of each member (lag, retention headroom): three requests a member a round, at
    # 5 s 40% of an idle 20-member pool's Python time (py-spy). A member's lag feeds only its
    # status and the placement's minutes-long windows, not an executor count. It also paces a
    # member's dead-letter flushes and recovery (up to this much later).
    poll_seconds: float = 15.0
    backoff_base_seconds: float = BACKOFF_BASE_SECONDS
    # The pool's report to its pod, all members at once. Measured every round; published when
    # what the operator acts on changed (a phase, a failure, the revision: the word it waits for
    # to move a stream in or out, or to set a condition), else at the heartbeat: the figures
    # (lag, freshness, load) feed minutes-long windows. A PATCH every 5 s had been a third of
    # an idle pool's Python time and 12 of the API server's requests a minute per pool.
    report_seconds: float = 5.0
    heartbeat_seconds: float = 30.0
    stop: threading.Event = field(default_factory=threading.Event, compare=False)


class Member:
    """One stream of the pool, in a thread of its own: start, wait, and on failure back off and
    start again (or, for a failure a restart cannot fix, wait for a new manifest), until
    stopped."""

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
        self.load = LoadMeter()

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the member's thread to end; whether it did."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def report(self, now: float) -> dict[str, Any]:
        """The member's status, its last batch, lag and freshness as its runner knows them,
        and its load (``measure`` feeds it)."""
        with self._lock:
            runner = self.runner
            last = runner.writer.last_report if runner and runner.writer else None
            if last is not None:
                self.status.last_batch = last.batch_id
            report = self.status.as_report(now)
        # Two report rounds make a figure; the placement's own windows smooth it further.
        cores = self.load.cores(min_span_seconds=2 * self._options.report_seconds)
        if cores is not None:
            report["busyCores"] = round(cores, 4)
        if runner is not None and self.status.phase == "Running":
            if runner.lag is not None:
                report["lag"] = runner.lag
            report["freshness"] = runner.freshness_report(now)
            if runner.writer is not None and runner.writer.group_commit_problem:
                report["groupCommit"] = {"error": runner.writer.group_commit_problem}
        return report

    def measure(self, now: float, busy_seconds: float) -> None:
        """One sample of the task time its scheduler pool ran so far (cost.PoolTaskTime)."""
        self.load.sample(now, busy_seconds)

    @functools.cached_property
    def session(self) -> SparkSession:
        """A session of the member's own: its SQL settings and its query manager (so its
        progress listener hears its own query only). One for all the member's starts: Spark
        never lets go of a session's query listener bus."""
        from pyspark.errors import AnalysisException, IllegalArgumentException

        session = self._spark.newSession()
        # A new session starts from the SparkConf: the data plane's session settings as the
        # pool's session holds them (whoever set them), the member's own, then the pinned ones
        # again (as in a driver of its own, the spec cannot turn those off).
        inherited = {**DEFAULT_CONF, **PINNED_CONF}
        for key in inherited:
            value = self._spark.conf.get(key, None)
            if value is not None and pool_member_conf_key(key):
                session.conf.set(key, value)
        for key, value in self.pipeline.ingestion.spec.spark_conf.items():
            try:
                session.conf.set(key, value)
            except (AnalysisException, IllegalArgumentException) as error:  # CANNOT_MODIFY_CONFIG
                raise InvalidSpecError(
                    f"spec.sparkConf.{key}: Spark refused it on a pooled stream's session "
                    f"({str(error).splitlines()[0][:300]}); remove it or run the stream on a "
                    "driver of its own"
                ) from None
        for key, value in PINNED_CONF.items():
            if key in self.pipeline.ingestion.spec.spark_conf:
                session.conf.set(key, value)  # static ones never get here: pool_conflicts
        return session

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                self._run_once()
        except Exception:  # never leave a member silently dead: the pool replaces it
            log.exception("member %s: its thread failed", self.key)
        with self._lock:
            self.status.phase = "Stopped"
        _event("member_stopped", self.key)

    def _run_once(self) -> None:
        """One start and run; a failure's backoff (or NeedsAction's wait) before returning."""
        with self._lock:
            self.status = replace(
                self.status, phase="Starting", retry_at=None, started_at=time.time()
            )
        runner: StreamRunner | None = None
        try:
            session = self.session
            # The query's own thread inherits this thread's scheduler pool.
            session.sparkContext.setLocalProperty(SCHEDULER_POOL, self.key)
            if not self._checks_before_start():
                return  # stopped meanwhile
            start_checks(session, self.pipeline)
            runner = StreamRunner(
                session,
                self.pipeline,
                StreamOptions(
                    config_hint=self.source,
                    stop=self.stop,
                    poll_seconds=self._options.poll_seconds,
                    stop_grace_seconds=self._options.stop_grace_seconds,
                    pool_member=self.key,
                ),
            )
            with self._lock:
                self.runner = runner
            self._on_metrics(self.key, runner.metrics)
            if self.stop.is_set():
                return
            runner.start()
            with self._lock:
                self.status.phase = "Running"
            _event("member_started", self.key, failures=self.status.failures)
            runner.wait()
        except Exception as error:
            if runner is not None:
                try:
                    runner.release()  # a start that failed half way leaves nothing behind
                except Exception:
                    log.warning("member %s: releasing a failed start failed", self.key)
            if self.stop.is_set() and not isinstance(error, DeltaflowError):
                return  # stopped mid-start: what failed is the stop's doing
            self._failed(error)
            self._wait_after_failure()
            return
        if not self.stop.is_set():
            # The query ended by itself (in a pool only a failure ends one: raised above).
            self._failed(RuntimeError("the query ended without a stop"))
            self._wait_after_failure()

    def _checks_before_start(self) -> bool:
        """A dedicated driver's checks before its JVM, for this member: its paths on volumes
        (in a pod), a topicPattern no regex reads, then whether it can connect, log in with its
        credentials and read its topic (each failure names the field: its status says why in
        seconds, not a Java trace). False when stopped meanwhile."""
        source = self.pipeline.ingestion.spec.source
        check_paths_outlive_the_pod(self.pipeline.ingestion)
        check_topic_pattern(None, source)
        material = KafkaMaterial.locate(source)
        return check_kafka(source, material, self.pipeline.identity.consumer_group, stop=self.stop)

    def _wait_after_failure(self) -> None:
        if self.status.phase == "NeedsAction":
            self.stop.wait()  # a new manifest (a new member) or the pool's stop ends it
        else:
            self.stop.wait(max(0.0, (self.status.retry_at or 0) - time.time()))

    def _failed(self, error: Exception) -> None:
        reason = failure_reason(error)
        message = error.message if isinstance(error, DeltaflowError) else f"{error}"
        message = f"{type(error).__name__}: {message}"[:2000]
        now = time.time()
        with self._lock:
            failures = failures_in_a_row(self.status.failures, self.status.started_at, now) + 1
            helps = restart_helps(reason)
            wait = backoff_seconds(failures, self._options.backoff_base_seconds)
            self.status = replace(
                self.status,
                phase="BackingOff" if helps else "NeedsAction",
                failures=failures,
                reason=str(reason),
                message=message,
                retry_at=now + wait if helps else None,
            )
        if helps:
            log.error("member %s failed (%s), starting again in %.0f s: %s", self.key, reason,
                      wait, message)  # fmt: skip
        else:
            log.error("member %s failed (%s), a restart cannot fix it: %s", self.key, reason,
                      message)  # fmt: skip
        _event("member_failed", self.key, reason=str(reason), failures=failures,
               backoff=wait if helps else None)  # fmt: skip


def _event(name: str, key: str, **fields: Any) -> None:
    log.info("%s", json.dumps({"event": name, "member": key, **fields}))


@dataclass(frozen=True)
class Manifest:
    """One member's file as last read: its pipeline, or why it cannot run."""

    path: Path
    digest: str
    pipeline: Pipeline | None
    problem: tuple[FailureReason, str] | None


# The folder's revision: a file the operator writes with every change of the members (its
# ConfigMap key ``revision``). The pool reports the revision it last acted on, so the operator
# knows a member it removed has been told to stop (and, once gone from the report, has).
REVISION_FILE = "revision"


def read_revision(folder: Path) -> str | None:
    """The folder's revision (None without one: a folder not written by the operator)."""
    try:
        return (folder / REVISION_FILE).read_text().strip()[:64] or None
    except FileNotFoundError:
        return None


# A file's parse by (file name, content digest): a pool rescans every few seconds, and parsing
# YAML in Python costs milliseconds a file, which twenty idle members would pay every rescan.
Parsed = dict[tuple[str, str], "DeltaIngestion | DeltaflowError"]


def read_members(
    folder: Path, namespace: str, shared: Shared, parsed: Parsed | None = None
) -> dict[str, Manifest]:
    """The member manifests in ``folder`` (``*.yaml``, the ConfigMap's keys), by member key
    (by file name for one that cannot be read as a member, names another namespace, or names a
    member an earlier file already does). Hidden files (a mounted ConfigMap's ``..data``
    links) are not members. A file that cannot be read fails the whole read (OSError): the
    members stay as they are. ``parsed`` keeps the last read's parses (files unchanged since
    are not parsed again); it is left holding this read's only."""
    found: dict[str, Manifest] = {}
    cache: Parsed = {} if parsed is None else parsed
    seen: Parsed = {}
    for path in sorted(folder.glob("*.yaml")):
        if path.name.startswith("."):
            continue
        raw = path.read_bytes()
        digest = hashlib.sha256(raw).hexdigest()
        known = cache.get((path.name, digest))
        if known is None:
            try:
                known = ingestion_from_text(raw.decode("utf-8"), str(path))
            except UnicodeDecodeError as error:
                known = ConfigError(str(path), [f"not UTF-8 text: {error.reason}"])
            except DeltaflowError as error:
                known = error
        seen[(path.name, digest)] = known
        if isinstance(known, DeltaflowError):
            found[path.name] = Manifest(path, digest, None, (known.reason, known.message))
            continue
        ingestion = known
        # Another namespace's stream is never this pool's member: it is reported by its file.
        key = member_key(ingestion) if ingestion.namespace == namespace else path.name
        if key in found:
            duplicate = (FailureReason.INVALID_SPEC, f"{found[key].path.name} already runs {key}")
            found[path.name] = Manifest(path, digest, None, duplicate)
            continue
        conflicts = pool_conflicts(ingestion, namespace, shared)
        problem = None
        if conflicts:
            problem = (FailureReason.INVALID_SPEC, "; ".join(conflicts))
        found[key] = Manifest(path, digest, Pipeline.of(capped(ingestion)), problem)
    cache.clear()
    cache.update(seen)
    return found


class StreamPool:
    """The pool's members, kept in line with the folder of manifests until stopped."""

    def __init__(
        self,
        spark: SparkSession,
        folder: Path,
        options: PoolOptions,
        shared: Shared | None = None,
    ) -> None:
        self.spark = spark
        self.folder = folder
        self._parsed: Parsed = {}  # the last rescan's parses (read_members)
        self.options = options
        self.shared = shared or Shared()
        self.members: dict[str, Member] = {}
        self.invalid: dict[str, MemberStatus] = {}
        # Members told to stop whose thread has not ended: their key starts again only after.
        self.stopping: dict[str, Member] = {}
        self.registries = StreamRegistries()
        self._lock = threading.Lock()
        self._counting = False  # whether the JVM counts task time per member (PoolTaskTime)
        self.revision: str | None = None  # of the folder, as the last whole scan acted on it
        self._pacer = ReportPacer(options.heartbeat_seconds)

    def status(self) -> dict[str, dict[str, Any]]:
        """Every member's status by key (invalid manifests by key or file name). A member told
        to stop is ``Stopping`` until its thread has ended (its in-flight batch committed), and
        gone from the report after: whoever starts it elsewhere waits for that."""
        now = time.time()
        self._reap()  # a member whose thread has ended is gone now, not at the next scan
        with self._lock:
            members, invalid = dict(self.members), dict(self.invalid)
            stopping = dict(self.stopping)
        report = {key: {**m.report(now), "phase": "Stopping"} for key, m in stopping.items()}
        report.update({key: member.report(now) for key, member in members.items()})
        report.update({key: status.as_report(now) for key, status in invalid.items()})
        return report

    def report(self) -> dict[str, Any]:
        """The pool's report of all its members, each measured now (one annotation a round:
        ``deltaflow.io/pool-report``)."""
        now = time.time()
        with self._lock:
            members = list(self.members.values())
        busy = pool_busy_seconds(self.spark) if self._counting else None
        if busy is not None:  # a failed reading is no reading, never a 0
            for member in members:
                member.measure(now, busy.get(member.key, 0.0))
        with self._lock:
            revision = self.revision
        return fit_report({"at": round(now, 3), "revision": revision, "members": self.status()})

    def _report_loop(self, publish: Callable[[dict[str, Any]], None]) -> None:
        stop = self.options.stop
        while not stop.wait(self.options.report_seconds):
            try:
                report = self.report()
                if self._pacer.due(report, time.monotonic()):
                    self._publish(publish, report)
            except Exception as error:  # a report that fails must not stop the members
                log.warning("publishing the pool's report failed: %s", error)

    def _publish(self, publish: Callable[[dict[str, Any]], None], report: dict[str, Any]) -> None:
        publish(report)
        self._pacer.said(report, time.monotonic())  # a failed one is due again next round

    def scan(self) -> None:
        """Start, stop and restart members as the folder now says."""
        # Read before the members: a change between the two reads reports an older revision
        # than was acted on (the operator waits a round longer), never a newer one.
        revision = read_revision(self.folder)
        wanted = read_members(self.folder, self.options.namespace, self.shared, self._parsed)
        self._reap()
        invalid: dict[str, MemberStatus] = {}
        with self._lock:
            gone = [k for k in self.members if k not in wanted]
            changed = [
                k
                for k, member in self.members.items()
                if k in wanted and (wanted[k].digest != member.digest or not member.alive)
            ]
        self._stop([*gone, *changed])  # a changed one stops, then starts anew
        for key, manifest in wanted.items():
            if manifest.pipeline is None or manifest.problem is not None:
                reason, message = manifest.problem or (FailureReason.INVALID_SPEC, "invalid")
                invalid[key] = MemberStatus(
                    phase="Invalid", reason=str(reason), message=f"{manifest.path.name}: {message}"
                )
                if self.invalid.get(key) != invalid[key]:  # said once, not every scan
                    _event("member_invalid", key, reason=str(reason), message=invalid[key].message)
                continue
            if key in self.members or key in self.stopping:
                continue  # running as it is, or its previous run still stopping
            member = Member(
                self.spark,
                manifest.pipeline,
                source=str(manifest.path),
                digest=manifest.digest,
                options=self.options,
                on_metrics=self.registries.set,
            )
            if self._counting:  # its load from its first batch on
                busy = pool_busy_seconds(self.spark)
                if busy is not None:
                    member.measure(time.time(), busy.get(key, 0.0))
            with self._lock:
                self.members[key] = member
            member.start()
        with self._lock:
            self.invalid = invalid
            self.revision = revision

    def _stop(self, keys: list[str]) -> None:
        """Tell these members to stop (each after its in-flight batch); ``_reap`` collects them
        once they have."""
        with self._lock:
            for key in keys:
                member = self.members.pop(key)
                if member.alive and not member.stop.is_set():
                    log.info("member %s: stopping", key)
                member.stop.set()
                self.stopping[key] = member

    def _reap(self) -> None:
        with self._lock:
            for key, member in list(self.stopping.items()):
                if not member.alive:
                    del self.stopping[key]
                    if key not in self.members:
                        self.registries.set(key, None)

    def run(self, publish: Callable[[dict[str, Any]], None] | None = None) -> None:
        """Keep the members in line with the folder until the pool's stop, reporting on them
        every ``report_seconds`` to ``publish`` (the pool pod's annotation); then stop them all
        together (each after its in-flight batch), waiting for them at most their grace."""
        stop = self.options.stop
        self._counting = install_pool_task_time(self.spark)
        if publish is not None:
            threading.Thread(
                target=self._report_loop, args=(publish,), name="deltaflow-pool-report",
                daemon=True,
            ).start()  # fmt: skip
        gone: str | None = None
        first_report = True
        while not stop.is_set():
            gone = spark_gone(self.spark)
            if gone is not None:
                stop.set()  # every member would fail and back off forever: the pod restarts
                break
            try:
                self.scan()
                if first_report and publish is not None:
                    # At once, not a round later: the operator waits for a pool's word on the
                    # revision before it moves a stream in or out.
                    first_report = False
                    self._publish(publish, self.report())
            except Exception:  # a scan that fails leaves the members as they are
                log.exception("reading the pool's members failed")
            stop.wait(self.options.rescan_seconds)
        with self._lock:
            keys = list(self.members)
        self._stop(keys)
        # A member's stop: its batch's grace, its Kafka poll's end, its dead letters' commit.
        deadline = time.monotonic() + self.options.stop_grace_seconds + POLLER_JOIN_SECONDS + 30
        for key, member in list(self.stopping.items()):
            if not member.join(max(0.0, deadline - time.monotonic())):
                log.warning("member %s did not stop in time", key)
        if gone is not None:
            raise SparkGoneError(f"the pool's Spark stopped under its members: {gone}")
        await_pool_log_checkpoints(self.spark)


class SparkGoneError(DeltaflowError):
    """The pool's JVM or SparkContext stopped: the pool exits and its pod restarts."""


def spark_gone(spark: SparkSession) -> str | None:
    """Why the pool's Spark can no longer run a member (its context stopped, its JVM gone),
    or None while it can."""
    try:
        if scala_context(spark).isStopped():
            return "the SparkContext stopped"
    except Exception as error:  # py4j: the JVM is gone
        return f"{type(error).__name__}: {error}"[:500]
    return None


# The report goes on the pod, whose annotations Kubernetes caps at 256 KiB in all.
MAX_REPORT_BYTES = 200_000
REPORT_MESSAGE_CHARS = 400


# What in a member's report the operator acts on at once (the rest are figures it averages).
SIGNAL_FIELDS = ("phase", "failures", "reason", "message", "retryAt", "startedAt", "groupCommit")


def report_signal(report: dict[str, Any]) -> str:
    """The part of a pool's report whose change is published at once: the revision acted on,
    which members it lists, and each one's phase and failure."""
    members: dict[str, dict[str, Any]] = report.get("members") or {}
    said = {k: [m.get(f) for f in SIGNAL_FIELDS] for k, m in members.items()}
    return json.dumps([report.get("revision"), said], sort_keys=True, default=str)


@dataclass
class ReportPacer:
    """When a pool publishes its report: at once when its signal changed, else once the
    heartbeat is due (the operator takes a report older than twice that as a silent pool)."""

    heartbeat_seconds: float
    _signal: str | None = None
    _at: float | None = None

    def due(self, report: dict[str, Any], now: float) -> bool:
        if self._at is None or now - self._at >= self.heartbeat_seconds:
            return True
        return report_signal(report) != self._signal

    def said(self, report: dict[str, Any], now: float) -> None:
        self._signal, self._at = report_signal(report), now


def fit_report(report: dict[str, Any]) -> dict[str, Any]:
    """``report`` within MAX_REPORT_BYTES: messages cut to REPORT_MESSAGE_CHARS; if it is
    still too large (hundreds of failing members), each member's phase, failures, reason,
    last batch and lag only, and ``trimmed`` says so."""
    members: dict[str, dict[str, Any]] = report["members"]
    for member in members.values():
        message = member.get("message")
        if isinstance(message, str) and len(message) > REPORT_MESSAGE_CHARS:
            member["message"] = message[: REPORT_MESSAGE_CHARS - 1] + "…"
    if len(json.dumps(report, separators=(",", ":"))) <= MAX_REPORT_BYTES:
        return report
    kept = ("phase", "failures", "reason", "lastBatch", "lag", "groupCommit")
    report["members"] = {k: {f: m[f] for f in kept if f in m} for k, m in members.items()}
    report["trimmed"] = True
    return report


def await_pool_log_checkpoints(spark: SparkSession) -> None:
    """At the pool's stop, once: the Delta log checkpoints its members' commits made due (a
    member's own stop does not wait for them: the wait is the JVM's, for every member)."""
    try:
        if not await_log_checkpoints(spark, LOG_CHECKPOINT_WAIT_SECONDS):
            log.warning("stopping with a Delta log checkpoint still being written")
    except Exception:
        log.debug("waiting for the Delta log checkpoints failed", exc_info=True)


def check_folder(folder: Path) -> None:
    """Refuse a members folder that does not exist."""
    if not folder.is_dir():
        raise InvalidSpecError(f"--members {folder}: no such folder of member manifests")


def wait_for_first_member(
    folder: Path, namespace: str, stop: threading.Event, every: float = 5.0
) -> Shared | None:
    """What the pool's session and members are made for: its first valid member's
    :class:`Shared` in the namespace (the operator pools only members that share it; another
    member is refused, see pool_conflicts). Waits for one (a ConfigMap's keys reach a pod a
    while after it starts); None if stopped first."""
    while not stop.is_set():
        manifests: list[Manifest] = []
        try:
            manifests = list(read_members(folder, namespace, Shared()).values())
        except OSError as error:
            log.warning("reading the pool's members failed: %s", error)
        for manifest in manifests:
            if manifest.pipeline is not None:
                ingestion = manifest.pipeline.ingestion
                own = Shared.of(ingestion)
                if not pool_conflicts(ingestion, namespace, own):  # a member it can run
                    return own
        log.info("waiting for a member manifest in %s", folder)
        stop.wait(every)
    return None
