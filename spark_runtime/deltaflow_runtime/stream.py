"""Run one DeltaIngestion as a Structured Streaming query, with its guards, metrics and shutdown.

Start: resolve the format, check that the checkpoint belongs with the table (else refuse), check
that Kafka still holds every offset the stream will read (else fail loudly), then start the query.
While it runs: progress reports feed the metrics and a background poll keeps lag and retention
headroom current. SIGTERM lets an in-flight batch finish before the query stops.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, ClassVar

from deltaflow_api.cadence import (
    TriggerPlan,
    judged,
    needs_replan,
    plan_trigger,
    staggered_interval_ms,
    window_seconds,
)
from deltaflow_runtime.checkpoint import Checkpoint, TopicOffsets, render_offsets
from deltaflow_runtime.config import Pipeline
from deltaflow_runtime.cost import (
    CostMeter,
    executor_figures,
    jvm_pid,
    process_age_seconds,
    process_figures,
)
from deltaflow_runtime.errors import DeltaflowError, ExitCode
from deltaflow_runtime.executors import ExecutorControl, Executors, LocalExecutors
from deltaflow_runtime.freshness import FreshnessWindow, ages_at_commit
from deltaflow_runtime.guard import StreamFacts, check_checkpoint, check_kafka_identity
from deltaflow_runtime.jvm import jvm
from deltaflow_runtime.kafka_admin import KafkaIdentity
from deltaflow_runtime.kafka_auth import KafkaMaterial, librdkafka_config
from deltaflow_runtime.metrics import RuntimeMetrics, progress_sample
from deltaflow_runtime.offsets import DataLossError, KafkaAdmin, data_loss_gaps, describe_gaps
from deltaflow_runtime.parse import parse_spec
from deltaflow_runtime.pod_channel import PodChannel
from deltaflow_runtime.scaling_agent import ScalingAgent, SpecBounds
from deltaflow_runtime.sink import SCHEDULER_POOL, BatchReport, BatchWriter, read_tasks
from deltaflow_runtime.source import read_range, read_stream, spark_kafka_options
from deltaflow_runtime.table import (
    METADATA_KEY,
    SNAPSHOT_PARTITIONS,
    await_log_checkpoints,
    last_stream_commit,
    parse_commit_metadata,
    recorded_end_offsets,
    table_state,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.listener import StreamingQueryListener
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger("deltaflow.stream")


@dataclass(frozen=True)
class StreamOptions:
    """How to run the stream (beyond the spec)."""

    available_now: bool = False  # drain what is in Kafka now, then stop
    metrics_port: int | None = None  # None: no /metrics endpoint
    config_hint: str = "<ingestion.yaml>"  # named in recovery instructions
    # The mounted pipeline config (the driver pod): re-read for scaling bounds changed in place.
    config_path: Path | None = None
    poll_seconds: float = 5.0  # Kafka lag / retention poll (the operator's lag comes from it)
    stop_grace_seconds: float = 45.0  # SIGTERM: wait this long for an in-flight batch
    # Set by SIGTERM/SIGINT (install_stop_handlers): the command installs it before the JVM
    # starts, so a stop that comes during start-up is as graceful as one that comes later.
    stop: threading.Event = field(default_factory=threading.Event, compare=False)
    # Where the start-up's time went before the runner (the command's phases, in seconds): the
    # runner adds its guards and logs them with ``stream_starting``.
    startup_seconds: dict[str, float] = field(default_factory=dict, compare=False)
    # In a stream pool, the member's key: its batches' jobs run in the FAIR scheduler pool of
    # that name, and what is the process's is left to the pool (the report to the pod, the
    # process's cost, the wait for the JVM's log checkpoints at stop).
    pool_member: str | None = None


def gather_facts(spark: SparkSession, pipeline: Pipeline, checkpoint: Checkpoint) -> StreamFacts:
    """Read what the checkpoint, the table and the dead-letter table say about this stream."""
    ident = pipeline.identity
    sized = SNAPSHOT_PARTITIONS not in pipeline.ingestion.spec.spark_conf
    table = table_state(spark, ident.table_path, ident.txn_app_id, sized=sized)
    dead_letter = table_state(spark, ident.dead_letter_table_path, ident.txn_app_id, sized=sized)
    state = checkpoint.state()
    ours = recorded = commit = None
    batch = table.stream_batch
    if batch is not None:
        commit = last_stream_commit(
            spark, ident.table_path, ident.txn_app_id, latest_version=table.version
        )
        if (
            commit is not None
            and commit.batch == batch
            and state.latest_planned is not None
            and state.latest_planned >= batch
        ):
            ours = checkpoint.end_offsets(batch)
            parsed = parse_commit_metadata(json.dumps({METADATA_KEY: commit.entry}))
            recorded = parsed[2] if parsed is not None else None
    return StreamFacts(
        table_path=ident.table_path,
        checkpoint_path=ident.checkpoint_path,
        txn_app_id=ident.txn_app_id,
        checkpoint=state,
        table=table,
        dead_letter_table_path=ident.dead_letter_table_path,
        dead_letter=dead_letter,
        checkpoint_offsets_at_table_batch=ours,
        table_offsets_at_table_batch=recorded,
        last_commit=commit,
    )


def unread_records(committed: TopicOffsets, latest: TopicOffsets) -> int:
    """Records Kafka holds past the stream's committed offsets (a partition not read yet counts
    from offset 0)."""
    return sum(
        max(0, end - committed.get(topic, {}).get(partition, 0))
        for topic, parts in latest.items()
        for partition, end in parts.items()
    )


def check_retention(
    admin: KafkaAdmin, resume: TopicOffsets | None, fail_on_data_loss: bool
) -> None:
    """Fail (or warn) when Kafka no longer holds offsets the stream would resume from."""
    if not resume:
        return
    tps = [(t, p) for t, ps in resume.items() for p in ps]
    gaps = data_loss_gaps(resume, admin.earliest_offsets(tps))
    if not gaps:
        return
    message = describe_gaps(gaps, fail_on_data_loss)
    if fail_on_data_loss:
        raise DataLossError(gaps, message)
    log.warning("%s", message)


# A move to a new trigger interval tries the start-up checks this often, this far apart.
MOVE_ATTEMPTS = 6
MOVE_RETRY_SECONDS = 10.0
# How many batch ids the progress listener remembers to report each batch once.
SEEN_BATCHES_KEPT = 1024
# A stop waits this long for a log checkpoint being written after its commit (a few seconds of
# a small table's state replay; one not written is the next one's work).
LOG_CHECKPOINT_WAIT_SECONDS = 10.0
# A pool member's stop waits this long for its Kafka poll thread (three Kafka calls' timeouts).
POLLER_JOIN_SECONDS = 50.0


def first_report(seen: set[int], batch_id: int) -> bool:
    """Whether ``batch_id``'s progress is reported for the first time (then remembered in
    ``seen``). A stream runs for months: only the recent ids are kept (a batch's report comes
    shortly after it; the listener bus is never hundreds of batches behind)."""
    if batch_id in seen:
        return False
    seen.add(batch_id)
    if len(seen) > SEEN_BATCHES_KEPT:
        newest = max(seen)
        for old in [b for b in seen if b <= newest - SEEN_BATCHES_KEPT // 2]:
            seen.discard(old)
    return True


class StreamRunner:
    """One running stream: the query, its writer, the Kafka poll and the signal handling."""

    def __init__(self, spark: SparkSession, pipeline: Pipeline, options: StreamOptions) -> None:
        self.spark = spark
        self.pipeline = pipeline
        self.options = options
        self.metrics = RuntimeMetrics()
        self._stop = options.stop
        self._done = threading.Event()
        source = pipeline.ingestion.spec.source
        self.kafka_material = KafkaMaterial.locate(source)
        self.kafka_material.check(source)
        self.admin = KafkaAdmin(librdkafka_config(source, self.kafka_material))
        self.checkpoint = Checkpoint(spark, pipeline.identity.checkpoint_path)
        self.query: StreamingQuery | None = None
        self.writer: BatchWriter | None = None
        self.scaling: ScalingAgent | None = None
        self._partitions = 0
        self.query_name = f"deltaflow-{pipeline.ingestion.namespace}-{pipeline.ingestion.name}"
        self._progress_lock = threading.Lock()
        self._seen_batches: set[int] = set()
        self._first_progress = True
        self._listener: StreamingQueryListener | None = None
        spec = pipeline.ingestion.spec
        self.freshness = FreshnessWindow(window_seconds(spec.freshness.target_seconds))
        self.plan = plan_trigger(spec.freshness.target_seconds, None, spec.trigger.pinned_seconds)
        self._replan: TriggerPlan | None = None  # a new interval, taken at the next idle moment
        # When the running interval was taken (epoch seconds): the start, or a move's beginning
        # (set before the plan, so whoever reads the new plan reads its time too).
        self.plan_since = 0.0
        self.cost = CostMeter()
        self._records = 0  # landed since start (the cost per million records)
        self._driver_pids = [os.getpid()]
        self._executors: ExecutorControl | None = None  # for the cost sample
        self._kafka_options: dict[str, str] = {}
        self._poller: threading.Thread | None = None
        # The last Kafka poll's lag: {"at", "records" not yet read, "partitions"} (a pool's
        # report of its members; a driver's own report has the offsets themselves).
        self.lag: dict[str, Any] | None = None

    def preflight(self) -> tuple[StreamFacts, TopicOffsets | None]:
        """The start-up guards; returns the facts and where the stream resumes (None: new)."""
        facts = gather_facts(self.spark, self.pipeline, self.checkpoint)
        check_checkpoint(facts, self.options.config_hint)
        last = facts.last_commit
        recorded = None if last is None else KafkaIdentity.recorded(last.entry)
        if last is not None and recorded is not None:
            source = self.pipeline.ingestion.spec.source
            try:
                current = self.admin.identity(sorted(recorded.topic_ids))
            except Exception as error:  # a safeguard: a broker that will not say (ACLs) is no
                # reason to fail every start; Spark's own Kafka errors still apply
                log.warning("reading the Kafka cluster and topic ids failed: %s", error)
            else:
                check_kafka_identity(recorded, current, last.batch, source.bootstrap_servers)
        resume = self.checkpoint.resume_offsets()
        check_retention(self.admin, resume, self.pipeline.ingestion.spec.source.fail_on_data_loss)
        return facts, resume

    def start(self) -> StreamingQuery:
        """Run the guards and start the query."""
        ident = self.pipeline.identity
        clock = time.monotonic()
        resume = self._prepare()
        startup = {**self.options.startup_seconds, "guards": time.monotonic() - clock}
        self.metrics.info.labels(ident.txn_app_id, ident.consumer_group, ident.table_path).set(1)
        if self.options.metrics_port is not None:
            self.metrics.serve(self.options.metrics_port)
        log.info(
            "%s",
            json.dumps(
                {
                    "event": "stream_starting",
                    "txnAppId": ident.txn_app_id,
                    "table": ident.table_path,
                    "deadLetterTable": ident.dead_letter_table_path,
                    "checkpoint": ident.checkpoint_path,
                    "consumerGroup": ident.consumer_group,
                    "resumeOffsets": resume,
                    "minPartitions": self.writer.min_partitions if self.writer else None,
                    "trigger": "availableNow"
                    if self.options.available_now
                    else {"intervalSeconds": self.plan.interval_seconds, "plan": self.plan.reason},
                    "startupSeconds": {phase: round(took, 2) for phase, took in startup.items()},
                }
            ),
        )
        self._listener = _progress_listener(self)
        self.spark.streams.addListener(self._listener)
        pid = jvm_pid(self.spark)
        if pid is not None and pid != os.getpid():
            self._driver_pids.append(pid)
        self.sample_cost()
        self.plan_since = time.time()
        self.query = self._start_query()
        self.metrics.trigger_interval.set(self.plan.interval_seconds)
        self._start_scaling(self.query)  # first: the first Kafka poll goes into its report
        self._poller = threading.Thread(
            target=self._poll_kafka, name="deltaflow-kafka-poll", daemon=True
        )
        self._poller.start()
        return self.query

    def _prepare(self) -> TopicOffsets | None:
        """The guards, a writer that knows only what the table and the checkpoint say (as in a
        new process), and the dead letters a stopped query left waiting; returns where the
        stream resumes (None: new)."""
        ingestion, ident = self.pipeline.ingestion, self.pipeline.identity
        spec = parse_spec(self.spark, ingestion.spec.format, ingestion.spec.sink)
        facts, resume = self.preflight()
        # In a driver pod the operator scales the executors (see tasks_per_batch), in local mode
        # too: its autoscaler rates a count of 0 by these tasks, and a move keeps them.
        conf = self.spark.sparkContext.getConf()
        scaled = ExecutorControl(self.spark).supported() or bool(
            conf.get("spark.kubernetes.driver.pod.name")
        )
        tasks = ingestion.spec.tasks_per_batch(scaled_executors=scaled)
        writer = BatchWriter(
            spark=self.spark,
            stream=ident,
            spec=spec,
            partition_by=list(ingestion.spec.sink.partition_by),
            optimize_write=ingestion.spec.sink.optimize_write,
            checkpoint=self.checkpoint,
            admin=self.admin,
            metrics=self.metrics,
            table_batch=facts.table.stream_batch,
            dead_letter_batch=-1
            if facts.dead_letter.stream_batch is None
            else facts.dead_letter.stream_batch,
            min_partitions=tasks,
            size_snapshot_partitions=SNAPSHOT_PARTITIONS not in ingestion.spec.spark_conf,
            scheduler_pool=self.options.pool_member,
        )
        writer.seed_committed(resume)
        options = spark_kafka_options(
            ingestion.spec.source, self.kafka_material, min_partitions=tasks
        )
        self._kafka_options = options
        # Dead letters a stopped driver left waiting: written after this run's first table
        # commit, so that a recovery's start does not wait for them; at once when no record
        # waits in Kafka (no batch would come to write them).
        plan = writer.plan_recovery(lambda start, end: read_range(self.spark, options, start, end))
        if plan is not None and (plan.interrupted or not self._backlog(resume)):
            writer.recover_dead_letters()
        # Published whole: the Kafka poll and the listener never see a writer half set up.
        self.writer = writer
        return resume

    def _backlog(self, resume: TopicOffsets | None) -> bool:
        """Whether Kafka holds records past ``resume`` (True when it cannot say: the recovery
        then waits for the first batch, or the stop)."""
        try:
            tps = self.admin.partitions(self._topics())
            return unread_records(resume or {}, self.admin.latest_offsets(tps)) > 0
        except Exception as error:
            log.warning("reading Kafka's latest offsets at start failed: %s", error)
            return True

    def _start_query(self) -> StreamingQuery:
        """Start the query on the checkpoint with the current trigger plan."""
        assert self.writer is not None
        writer = (
            read_stream(self.spark, self._kafka_options)
            .writeStream.foreachBatch(self.writer)
            .option("checkpointLocation", self.pipeline.identity.checkpoint_path)
            .queryName(self.query_name)
        )
        if self.options.available_now:
            return writer.trigger(availableNow=True).start()
        interval_ms = staggered_interval_ms(self.plan, self.pipeline.identity.checkpoint_path)
        return writer.trigger(processingTime=f"{interval_ms} milliseconds").start()

    def _move_to(self, plan: TriggerPlan) -> None:
        """Restart the query, between batches, on a new trigger interval (Spark fixes a query's
        trigger at its start). As a driver restart without the JVM's: should a batch have begun
        after all, the stop cuts it like a crash would, so the writer is built again from what
        the table and the checkpoint say, never from what the stopped query's writer held."""
        assert self.query is not None
        old = self.plan
        self.query.stop()
        self._commit_waiting_dead_letters()
        self.plan_since = time.time()
        self.plan, self._replan = plan, None
        self._prepare_again()
        if self._stop.is_set():
            return  # stopped meanwhile: wait() sees the stopped query end and stops cleanly
        self.query = self._start_query()
        self.metrics.trigger_interval.set(plan.interval_seconds)
        if self.scaling is not None:
            self.scaling.set_run_id(str(self.query.runId))
        log.info(
            "%s",
            json.dumps(
                {
                    "event": "trigger_replanned",
                    "fromSeconds": old.interval_seconds,
                    "toSeconds": plan.interval_seconds,
                    "plan": plan.reason,
                }
            ),
        )

    def _prepare_again(self) -> None:
        """The start-up guards of a move, tried again while they fail for a passing reason (a
        Kafka or object-store hiccup must not end a stream that was running); a guard's own
        verdict (DataLoss, a checkpoint mismatch, ...) and a stop end the tries."""
        for attempt in range(1, MOVE_ATTEMPTS + 1):
            try:
                self._prepare()
                return
            except DeltaflowError:
                raise
            except Exception as error:
                if attempt == MOVE_ATTEMPTS or self._stop.is_set():
                    raise
                log.warning(
                    "restarting the query on its new trigger interval: the start-up checks "
                    "failed (%s); trying again in %.0f s",
                    error,
                    MOVE_RETRY_SECONDS,
                )
                self._stop.wait(MOVE_RETRY_SECONDS)

    def freshness_report(self, now: float) -> dict[str, Any]:
        target = self.pipeline.ingestion.spec.freshness.target_seconds
        return self.freshness.report(now, self.plan, target)

    def _start_scaling(self, query: StreamingQuery) -> None:
        """In a driver pod, run the autoscaling agent: it reports to the operator and sets the
        executor count it asks for (none in local mode, where a count is a move: LocalExecutors)."""
        conf = self.spark.sparkContext.getConf()
        pod, namespace = (
            conf.get("spark.kubernetes.driver.pod.name"),
            conf.get("spark.kubernetes.namespace"),
        )
        if not pod or not namespace or self.options.pool_member is not None:
            return  # not in a driver pod (deltaflow run, tests): nobody to report to
        cluster = ExecutorControl(self.spark)
        control: Executors = cluster if cluster.supported() else LocalExecutors(self.spark)
        scaling = self.pipeline.ingestion.spec.scaling
        bounds = SpecBounds(
            self.options.config_path, (scaling.min_executors, scaling.max_executors)
        )
        self.scaling = ScalingAgent(
            control,
            PodChannel(namespace, pod),
            query_id=str(query.id),
            bounds=bounds,
            freshness=self.freshness_report,
            cost=lambda _now: self.cost.report(),
            group_commit_problem=lambda: self.writer.group_commit_problem if self.writer else "",
        )
        self.scaling.set_run_id(str(query.runId))
        threading.Thread(
            target=self.scaling.run, args=(self._done,), name="deltaflow-scaling", daemon=True
        ).start()

    def _topics(self) -> list[str]:
        source = self.pipeline.ingestion.spec.source
        if source.topic is not None:
            return [source.topic]
        return self.admin.topics_matching(str(source.topic_pattern))

    def poll_kafka_once(self) -> int:
        """Refresh lag and retention headroom from Kafka; returns the records not yet read."""
        assert self.writer is not None
        tps = self.admin.partitions(self._topics())
        self._partitions = len(tps)
        committed = self.writer.committed_offsets
        earliest, latest = self.admin.earliest_offsets(tps), self.admin.latest_offsets(tps)
        self.metrics.observe_offsets(committed, earliest, latest)
        if self.scaling is not None:
            self.scaling.observe_kafka(time.time(), latest, committed)
        gaps = data_loss_gaps(committed, earliest)
        if gaps:
            log.error(
                "%s", describe_gaps(gaps, self.pipeline.ingestion.spec.source.fail_on_data_loss)
            )
        unread = unread_records(committed, latest)
        self.lag = {"at": round(time.time(), 3), "records": unread, "partitions": len(tps)}
        return unread

    def _poll_kafka(self) -> None:
        member = self.options.pool_member
        if member is not None:  # its dead-letter commits run in the member's scheduler pool
            self.spark.sparkContext.setLocalProperty(SCHEDULER_POOL, member)
        while not self._done.is_set():
            lag: int | None = None
            try:
                lag = self.poll_kafka_once()
            except Exception as error:  # a Kafka hiccup must not stop the stream
                log.warning("polling Kafka offsets failed: %s", error)
                if self.scaling is not None:
                    self.scaling.kafka_failed(time.time(), str(error) or type(error).__name__)
            self._flush_due(caught_up=lag == 0)
            try:
                if self.writer is not None and not self._done.is_set():
                    self.writer.sync_group()
            except Exception as error:  # the group serves lag tools only, never the stream
                log.warning("committing to the consumer group failed: %s", error)
            try:
                if member is None:  # a pool's process is all its members'
                    self.sample_cost()
            except Exception as error:  # a figure for the status must never stop the stream
                log.warning("measuring the stream's cost failed: %s", error)
            self._done.wait(self.options.poll_seconds)

    def sample_cost(self) -> None:
        """Read the stream's running totals (CPU, executors, records) into its cost meter."""
        if self._executors is None:  # once: its py4j handles and the backend do not change
            self._executors = ExecutorControl(self.spark)
        control = self._executors
        registered = len(control.totals().registered) if control.supported() else 0
        executor_cpu, executor_rss = executor_figures(self.spark)
        self.cost.sample(
            time.time(),
            driver=process_figures(self._driver_pids),
            executor_cpu_seconds=executor_cpu,
            executor_rss_bytes=executor_rss,
            registered_executors=registered,
            records=self._records,
        )

    def _flush_due(self, caught_up: bool = False) -> None:
        """Commit waiting dead letters once due, or at once when the stream has read all Kafka
        holds (no batch is coming to share the commit with). A failure leaves them waiting: the
        next batch, the stop or the next start commits them."""
        if self.writer is None:
            return
        try:
            # A recovery planned at start is written here only once Kafka has nothing more to
            # read (no batch is coming to write it: a replayed batch writes none), and tried
            # here once; else by the next batch, where a failure stops the stream.
            self.writer.flush_dead_letters(
                due_only=not caught_up,
                recover=caught_up and self.writer.recovery_failures == 0,
            )
        except Exception:
            log.exception("committing the waiting dead letters failed (retried later)")

    def on_progress(self, raw: dict[str, Any]) -> None:
        """One batch's progress report (from the query listener, every batch exactly once)."""
        sample = progress_sample(raw)
        with self._progress_lock:
            if not first_report(self._seen_batches, sample.batch_id):
                return
        report = self.writer.recent_reports.get(sample.batch_id) if self.writer else None
        if report is not None and report.rows:
            # Rates are per record, counted by the writer (Spark's own count depends on how
            # many scans of the batch ran).
            sample = sample.scaled(report.rows)
        self.metrics.observe_progress(sample)
        batch_seconds = sample.durations_ms.get("triggerExecution", 0) / 1000
        if report is not None and report.outcome == "committed" and report.rows:
            self._records += report.rows
        if report is not None and report.committed_at is not None and report.rows:
            self._observe_freshness(report.committed_at, report, batch_seconds)
        measured = (
            self.scaling.on_batch(
                sample.batch_id,
                sample.input_rows,
                sample.durations_ms.get("triggerExecution", 0) / 1000,
                read_tasks(self._partitions, self.writer.min_partitions if self.writer else None),
            )
            if self.scaling is not None
            else None
        )
        line: dict[str, Any] = {
            "event": "batch_progress",
            "batch": sample.batch_id,
            "inputRows": sample.input_rows,
            "processedRowsPerSecond": round(sample.processed_rows_per_second, 1),
            "durationMs": sample.durations_ms,
        }
        if measured is not None:
            # What the capacity fit sees of this batch: why the autoscaler rates a core as it does.
            line["busyCoreSeconds"] = round(measured.busy_core_seconds, 3)
            line["slots"] = measured.slots
        if self._first_progress and self.options.pool_member is None:
            # How long this driver took to its first batch (spawn included): a recovery's or
            # a move's cost, as bench/start.py measures it from outside.
            self._first_progress = False
            age = process_age_seconds()
            if age is not None:
                line["sinceProcessStart"] = round(age, 1)
        log.info("%s", json.dumps(line, separators=(",", ":")))

    def _observe_freshness(
        self, committed_at: float, report: BatchReport, batch_seconds: float
    ) -> None:
        """One committed batch's ages; a new trigger plan when the measured steady batch time
        moves the interval the target allows."""
        ages = ages_at_commit(
            committed_at,
            report.oldest_ms,
            report.newest_ms,
            report.rows or 0,
            batch_seconds,
            log_checkpoint=report.log_checkpoint,
        )
        if ages is None:
            return
        self.freshness.add(ages)
        self.metrics.record_age.labels("oldest").set(ages.oldest)
        self.metrics.record_age.labels("newest").set(ages.youngest)
        if self.options.available_now:
            return
        spec = self.pipeline.ingestion.spec
        fresh = plan_trigger(
            spec.freshness.target_seconds,
            self.freshness.batch_seconds(),
            spec.trigger.pinned_seconds,
            self.freshness.checkpoint_batch_seconds(),
        )
        if needs_replan(self.plan, fresh):
            self._replan = fresh
        else:  # the status judges the interval running now at the measured batch time
            self.plan = judged(self.plan, fresh)

    def wait(self, timeout: float | None = None) -> None:
        """Block until the query ends; raise its failure (a data-loss failure, explained).
        With ``timeout``, stop the query and raise TimeoutError if it is still running then."""
        from pyspark.errors import StreamingQueryException

        assert self.query is not None
        stop_deadline: float | None = None
        in_flight = -1
        give_up = None if timeout is None else time.monotonic() + timeout
        try:
            while True:
                if give_up is not None and time.monotonic() > give_up:
                    self.query.stop()
                    raise TimeoutError(f"the stream still ran after {timeout:.0f}s")
                if (
                    self._replan is not None
                    and not self._stop.is_set()
                    # A query that ended (failed) is not idle: its failure must surface.
                    and self.query.isActive
                    and self.query.exception() is None
                    and not self.query.status["isTriggerActive"]
                ):
                    self._move_to(self._replan)
                try:
                    if self.query.awaitTermination(1):
                        break
                except StreamingQueryException as error:
                    self._explain_failure(error)
                    raise
                if self._stop.is_set():
                    now = time.monotonic()
                    if stop_deadline is None:
                        stop_deadline = now + self.options.stop_grace_seconds
                        in_flight = self._last_batch()
                    # Stop between triggers, or once a batch written after the request is also
                    # in the checkpoint's commits/ (Spark writes it after foreachBatch returns:
                    # stopping before would make the restart replay that batch).
                    last = self._last_batch()
                    if (
                        not self.query.status["isTriggerActive"]
                        or (last != in_flight and self._checkpoint_committed(last))
                        or now > stop_deadline
                    ):
                        self.query.stop()
        finally:
            self._done.set()
            self._commit_waiting_dead_letters()
            if self.options.pool_member is None:
                self._await_log_checkpoints()  # the JVM's: a pool waits once, at its stop
            self._drain_progress()
            self._join_poller()

    def _join_poller(self) -> None:
        """In a pool the member's next start shares the process: its Kafka poll ends first
        (a poll in flight ends within its Kafka timeouts)."""
        if self.options.pool_member is not None and self._poller is not None:
            self._poller.join(POLLER_JOIN_SECONDS)

    def release(self) -> None:
        """After a start that failed half way (a pool's member starts again in this process):
        the query stopped, its threads ended and its listener removed. ``wait`` does all this
        for a query that ran."""
        self._done.set()
        if self.query is not None and self.query.isActive:
            self.query.stop()
        if self._listener is not None:
            self.spark.streams.removeListener(self._listener)
            self._listener = None
        self._join_poller()

    def _await_log_checkpoints(self) -> None:
        try:
            if not await_log_checkpoints(self.spark, LOG_CHECKPOINT_WAIT_SECONDS):
                log.warning("stopping with a Delta log checkpoint still being written")
        except Exception:  # the JVM may be gone with the query's failure
            log.debug("waiting for the Delta log checkpoints failed", exc_info=True)

    def _commit_waiting_dead_letters(self) -> None:
        """At stop: the dead letters still waiting in the driver, committed. Should that fail,
        the next start reads them again from Kafka (their table commits say where)."""
        if self.writer is None:
            return
        try:
            self.writer.flush_dead_letters()
        except Exception:
            log.exception(
                "committing the waiting dead letters at stop failed (the next start does)"
            )

    def _drain_progress(self, timeout: float = 5.0) -> None:
        """Remove the listener once it has seen the last batch (Spark's listener bus delivers
        behind the query: the last report may still be on its way when the query ends)."""
        if self._listener is None:
            return
        last = self._last_batch()
        deadline = time.monotonic() + timeout
        while last >= 0 and time.monotonic() < deadline:
            with self._progress_lock:
                if last in self._seen_batches:
                    break
            time.sleep(0.05)
        self.spark.streams.removeListener(self._listener)
        self._listener = None

    def _checkpoint_committed(self, batch_id: int) -> bool:
        latest = self.checkpoint.state().latest_committed
        return latest is not None and latest >= batch_id

    def _last_batch(self) -> int:
        report = self.writer.last_report if self.writer is not None else None
        return -1 if report is None else report.batch_id

    def _explain_failure(self, error: Exception) -> None:
        """If the query died because retention deleted unread offsets, say which and how many.
        Any other failure stays what it was, even when offsets are also missing."""
        if not mentions_data_loss(str(error)):
            return
        try:
            resume = self.checkpoint.resume_offsets()
            check_retention(self.admin, resume, fail_on_data_loss=True)
        except DataLossError as loss:
            raise loss from error
        except Exception as probe:  # the original failure matters more than the probe's
            log.warning("could not check Kafka retention after the failure: %s", probe)


_STREAMING = "org.apache.spark.sql.streaming"


class _ProgressJson:
    """Spark's Java listener interface for Python (``PythonStreamingQueryListener``, called over
    py4j) handing on one query's progress as its JSON text only.

    PySpark's own ``StreamingQueryListener`` converts every event into Python objects first:
    dozens of py4j calls per batch, and each observed metric's row pickled through a class
    looked up by its short name (a failed class-path search per imported package). The driver
    spent a third of its Python CPU there at 500k records a batch (bench/README); the runner
    reads nothing but the JSON.
    """

    def __init__(self, name: str | None, handle: Callable[[dict[str, Any]], None]) -> None:
        self._name = name
        self._handle = handle

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 (Spark's name)
        pass

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802 (Spark's name)
        try:
            progress = event.progress()
            if progress.name() == self._name:
                self._handle(json.loads(progress.json()))
        except Exception:  # monitoring must never fail the listener bus
            log.exception("handling a progress report failed")

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802 (Spark's name)
        pass

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802 (Spark's name)
        pass

    class Java:
        implements: ClassVar[list[str]] = [f"{_STREAMING}.PythonStreamingQueryListener"]


def _progress_listener(runner: StreamRunner) -> StreamingQueryListener:
    """A query listener handing the runner every progress report of its own query (Spark posts
    one per batch; polling ``lastProgress`` missed batches shorter than the poll), as
    :class:`_ProgressJson` sees them: ``spark.streams.addListener`` registers its Java side."""
    from pyspark.sql.streaming.listener import StreamingQueryListener

    class ProgressListener(StreamingQueryListener):
        def __init__(self) -> None:
            # By its full name: one class look-up, not one per imported package.
            wrapper = getattr(jvm(), f"{_STREAMING}.PythonStreamingQueryListenerWrapper")
            # What PySpark's _jlistener hands addListener/removeListener when already set
            # (a test of the listener fails should a PySpark upgrade change that).
            self._jlistenerobj = wrapper(_ProgressJson(runner.query_name, runner.on_progress))

        # PySpark's abstract callbacks, which it would convert events for: Spark calls
        # _ProgressJson's instead.
        def onQueryStarted(self, event: Any) -> None:  # noqa: N802 (Spark's name)
            pass

        def onQueryProgress(self, event: Any) -> None:  # noqa: N802 (Spark's name)
            pass

        def onQueryTerminated(self, event: Any) -> None:  # noqa: N802 (Spark's name)
            pass

    return ProgressListener()


# How Spark's Kafka source words a failure from offsets Kafka no longer holds.
_DATA_LOSS_MARKERS = ("KAFKA_DATA_LOSS", "OffsetOutOfRange", "data may have been lost")


def mentions_data_loss(failure: str) -> bool:
    """Whether a query's failure is the Kafka source's data-loss failure."""
    return any(marker in failure for marker in _DATA_LOSS_MARKERS)


class RecoveryError(DeltaflowError):
    """The checkpoint cannot be rebuilt from the table; ``reason`` says why."""

    exit_code = ExitCode.REFUSED

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message, reason)


@dataclass(frozen=True)
class Recovered:
    """What ``recover-checkpoint`` rebuilt."""

    batch: int  # the table's last batch of this stream
    end_offsets: TopicOffsets  # where that batch ended
    replayed: bool  # the stream replays the batch first (its dead letters are written if lost)


def recover_checkpoint(spark: SparkSession, pipeline: Pipeline) -> Recovered:
    """Rebuild a lost checkpoint at the table's last batch, from the end offsets the stream
    recorded with its commits: the stream then resumes exactly where the table ends, replaying
    that last batch when the offsets of the one before are known (a crash between its table and
    dead-letter commits must not lose its dead letters)."""
    ident = pipeline.identity
    table = table_state(spark, ident.table_path, ident.txn_app_id)
    batch = table.stream_batch
    if batch is None:
        raise RecoveryError(
            "NothingToRecover",
            f"{ident.table_path} holds no transaction of {ident.txn_app_id}: nothing to recover "
            "from (a new stream starts from spec.source.startingOffsets).",
        )
    commit = last_stream_commit(
        spark, ident.table_path, ident.txn_app_id, latest_version=table.version
    )
    if commit is not None and commit.restore_version is not None and commit.batch < batch:
        raise RecoveryError(
            "TableRestored",
            f"{ident.table_path} was restored (version {commit.restore_version}) to before this "
            f"stream's batches {commit.batch + 1} to {batch}, which Delta still records as "
            "written: a rebuilt checkpoint would skip them. Undo the restore (RESTORE TABLE "
            f"delta.`{ident.table_path}` TO VERSION AS OF {commit.restore_version - 1}) or "
            "write the restored table with a new DeltaIngestion.",
        )
    offsets = recorded_end_offsets(
        spark, ident.table_path, ident.txn_app_id, batch, latest_version=table.version
    )
    if offsets is None:
        raise RecoveryError(
            "OffsetsNotRecorded",
            f"the table's commit of batch {batch} is no longer in its log (or has "
            "no recorded offsets): restore the checkpoint from a backup instead.",
        )
    previous = (
        recorded_end_offsets(
            spark, ident.table_path, ident.txn_app_id, batch - 1, latest_version=table.version
        )
        if batch > 0
        else None
    )
    if previous is None:
        dead = table_state(spark, ident.dead_letter_table_path, ident.txn_app_id)
        if dead.stream_batch is None or dead.stream_batch < batch:
            log.warning(
                "batch %d is not replayed (the offsets where it started are not recorded): if "
                "the previous driver died between its table and dead-letter commits, its dead "
                "letters (offsets up to %s) are not in %s",
                batch,
                render_offsets(offsets),
                ident.dead_letter_table_path,
            )
    try:
        replayed = Checkpoint(spark, ident.checkpoint_path).rebuild_at(batch, offsets, previous)
    except FileExistsError as error:
        raise RecoveryError("CheckpointExists", str(error)) from None
    return Recovered(batch, offsets, replayed)


def start_checks(spark: SparkSession, pipeline: Pipeline) -> None:
    """What a stream's start checks before its guards: Java accepts its topic pattern and its
    Kafka options (Spark would fail every start on one it refuses), and the object store
    answers for its checkpoint and tables."""
    from deltaflow_runtime.object_store import check_pipeline_access
    from deltaflow_runtime.source import check_kafka_options
    from deltaflow_runtime.topics import check_topic_pattern

    check_topic_pattern(spark, pipeline.ingestion.spec.source)
    check_kafka_options(spark, pipeline.ingestion.spec.source)
    check_pipeline_access(spark, pipeline)


def install_stop_handlers(stop: threading.Event) -> None:
    """SIGTERM (what Kubernetes sends on delete) and SIGINT set ``stop`` instead of killing
    the process: the stream stops at a batch boundary, or does not start at all."""

    def request_stop(signum: int, frame: FrameType | None) -> None:
        log.info("stop requested (signal %s): stopping after the in-flight batch", signum)
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, request_stop)
        signal.signal(signal.SIGINT, request_stop)


def run_stream(spark: SparkSession, pipeline: Pipeline, options: StreamOptions) -> StreamRunner:
    """Start the stream, wait for it to end (SIGTERM/SIGINT stop it gracefully) and return it.
    A stop requested before the query starts leaves it unstarted (``runner.query`` is None)."""
    runner = StreamRunner(spark, pipeline, options)
    install_stop_handlers(options.stop)
    if options.stop.is_set():
        log.info("stop requested during start-up: the stream is not started")
        return runner
    runner.start()
    runner.wait()
    return runner
