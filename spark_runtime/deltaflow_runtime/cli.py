"""The data-plane commands of ``deltaflow`` (dispatched here by ``deltaflow_cli.main``).

``run``       try a manifest locally: Spark local mode, local Kafka, object-store paths mapped to a
              local directory (same code as the driver).
``stream``    what the driver pod runs: the stream of the ingestion in ``--config``.
``pool``      a stream pool: the streams of the manifests in ``--members``, in one driver.
``optimize``  OPTIMIZE the table and the dead-letter table (the CronJob).
``vacuum``    VACUUM them with the spec's retention (the CronJob).
``recover-checkpoint``  rebuild a lost checkpoint from the offsets the table recorded.

Exit codes: 0 done, 1 failed, 2 invalid manifest, 3 checkpoint and table disagree, 4 Kafka
retention deleted unread records, 5 maintenance refused (e.g. unsafe VACUUM retention).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deltaflow_api.failures import FailureReason
from deltaflow_runtime.config import Pipeline, load_ingestion, localize
from deltaflow_runtime.cost import process_age_seconds
from deltaflow_runtime.errors import DeltaflowError, ExitCode, failure_reason
from deltaflow_runtime.jvm_archive import find_archive, with_archive

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

COMMANDS = ("run", "stream", "pool", "optimize", "vacuum", "recover-checkpoint", "jvm-archive")

log = logging.getLogger("deltaflow")


def _conf_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--conf",
        type=_conf_pair,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra Spark property (repeatable)",
    )
    parser.add_argument("--master", help="Spark master (default: from spark-defaults / local)")


def _stream_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--available-now",
        action="store_true",
        help="read what Kafka holds now, write it, and stop (instead of running on)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve Prometheus /metrics here (default: $DELTAFLOW_METRICS_PORT; 0 = off)",
    )


EXIT_CODES_HELP = """exit codes:
  0  done
  1  failed (in a pod: restarted with backoff)
  2  invalid manifest or arguments
  3  checkpoint and table disagree (needs a decision: see the message)
  4  Kafka retention deleted records the stream had not read
  5  maintenance refused (e.g. an unsafe VACUUM retention)"""


def build_parser() -> argparse.ArgumentParser:
    """Arguments of the data-plane subcommands (``python -m deltaflow_runtime``)."""
    parser = argparse.ArgumentParser(
        prog="deltaflow",
        description="Deltaflow data plane.",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_commands(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    return parser


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the data-plane subcommands (``COMMANDS``) to a ``deltaflow`` parser: this one's, and
    the ``deltaflow`` command's, which lists them with the operator's."""
    run = commands.add_parser(
        "run", help="run a DeltaIngestion manifest locally (Spark local mode)"
    )
    run.add_argument("-f", "--filename", type=Path, required=True, help="the manifest")
    run.add_argument(
        "--bootstrap-servers", help="Kafka to read instead of spec.source.bootstrapServers"
    )
    run.add_argument(
        "--local-dir",
        type=Path,
        default=Path("deltaflow-local"),
        help="where s3a:// and s3:// paths of the manifest go locally (default: ./deltaflow-local)",
    )
    run.add_argument(
        "--storage-endpoint",
        metavar="URL",
        help="keep s3a:// paths on the object store at URL instead of --local-dir (keys from "
        "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)",
    )
    run.add_argument("--cores", type=int, default=None, help="local[N] (default: all cores)")
    _stream_flags(run)
    _common(run)

    stream = commands.add_parser("stream", help="run the stream of a pipeline config (driver pod)")
    stream.add_argument("--config", type=Path, required=True, help="the ingestion.yaml")
    _stream_flags(stream)
    _common(stream)

    pool = commands.add_parser(
        "pool", help="run a stream pool: the DeltaIngestions of a folder, in one driver"
    )
    pool.add_argument(
        "--members",
        type=Path,
        required=True,
        help="folder of the members' manifests (*.yaml, read again as it changes)",
    )
    pool.add_argument("--namespace", required=True, help="the members' namespace (one per pool)")
    pool.add_argument(
        "--rescan-seconds",
        type=float,
        default=10.0,
        help="how often the members folder is read again (default: 10)",
    )
    pool.add_argument(
        "--report-file",
        type=Path,
        help="write the pool's report of its members here every round (JSON; in a pod the "
        "report goes on the pod, deltaflow.io/pool-report)",
    )
    pool.add_argument(
        "--restart-backoff-seconds",
        type=float,
        default=10.0,
        help="a failed member's first wait before it starts again, doubled per failure in a "
        "row up to 5 minutes (default: 10)",
    )
    pool.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve every member's Prometheus series here (default: $DELTAFLOW_METRICS_PORT)",
    )
    _common(pool)

    for name, text in (
        ("optimize", "OPTIMIZE the table and the dead-letter table"),
        ("vacuum", "VACUUM the table and the dead-letter table"),
        ("recover-checkpoint", "rebuild a lost checkpoint from the table's recorded offsets"),
    ):
        sub = commands.add_parser(name, help=text)
        sub.add_argument("--config", type=Path, required=True, help="the ingestion.yaml")
        _common(sub)
        if name == "vacuum":
            sub.add_argument(
                "--retention-hours",
                type=float,
                default=None,
                help="override spec.maintenance.vacuum.retentionHours (the 168 h floor still "
                "needs allowUnsafeRetention in the spec)",
            )

    archive = commands.add_parser(
        "jvm-archive",
        help="build the class-data archive that makes a driver's JVM start faster "
        "(the image has one; stack/install/jvm-archive.sh builds one into the cache)",
    )
    archive.add_argument("--output", type=Path, required=True, help="the archive to write")
    archive.add_argument(
        "--work-dir", type=Path, help="scratch space of the training run (default: a new one)"
    )


def _setup_logging() -> None:
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("py4j").setLevel(logging.WARNING)


def _extra_conf(args: argparse.Namespace, work_dir: Path | None) -> dict[str, str]:
    """``--conf``, and what a local run adds (its jars, scratch space)."""
    from deltaflow_runtime import session

    extra = dict(args.conf)
    if work_dir is not None:
        extra = {**session.local_conf(work_dir, getattr(args, "cores", None)), **extra}
    elif "spark.jars" not in extra:
        jars = session.find_local_jars()
        if jars:
            extra["spark.jars"] = ",".join(jars)
    return extra


def _build(conf: dict[str, str]) -> SparkSession:
    from deltaflow_runtime import session

    archive = find_archive(os.environ, session.cache_dir(os.environ))
    return session.build_session(with_archive(conf, archive))


def _session(pipeline: Pipeline, args: argparse.Namespace, work_dir: Path | None) -> SparkSession:
    from deltaflow_runtime import session

    extra = _extra_conf(args, work_dir)
    return _build(session.runtime_conf(pipeline.ingestion, master=args.master, extra=extra))


def _pool_channel(
    namespace: str, report_file: Path | None
) -> Callable[[dict[str, Any]], None] | None:
    """Where the pool reports: ``--report-file``, else its pod (its name from the downward
    API), else nowhere."""
    from deltaflow_api.driver_pod import ENV_POD_NAME

    if report_file is not None:

        def write(report: dict[str, Any]) -> None:
            partial = report_file.with_name(report_file.name + ".partial")
            partial.write_text(json.dumps(report, indent=1))
            partial.replace(report_file)  # readers never see half a report

        return write
    pod = os.environ.get(ENV_POD_NAME, "").strip()
    if not pod:
        return None
    from deltaflow_runtime.pod_channel import PodChannel

    return PodChannel(namespace, pod).publish_pool


def _pool(args: argparse.Namespace) -> int:
    """``deltaflow pool``: the members' streams in one driver until SIGTERM/SIGINT."""
    from deltaflow_runtime import session
    from deltaflow_runtime.pool import PoolOptions, StreamPool, check_folder, wait_for_first_member
    from deltaflow_runtime.stream import install_stop_handlers

    _setup_logging()
    try:
        check_folder(args.members)
        stop = threading.Event()
        install_stop_handlers(stop)  # before the JVM starts, as for one stream
        shared = wait_for_first_member(args.members, args.namespace, stop)
        if shared is None:
            return 0  # stopped before any member came
        conf = session.pool_conf(
            args.namespace, shared.storage, master=args.master, extra=_extra_conf(args, None)
        )
        spark = _build(conf)
    except DeltaflowError as error:
        return failed_with(error)
    except Exception as error:  # Spark could not start
        log.exception("starting the pool's Spark failed")
        return _fail(ExitCode.FAILED, failure_reason(error), f"{type(error).__name__}: {error}")
    try:
        options = PoolOptions(
            args.namespace,
            rescan_seconds=args.rescan_seconds,
            backoff_base_seconds=args.restart_backoff_seconds,
            stop=stop,
        )
        pool = StreamPool(spark, args.members, options, shared)
        port = _metrics_port(args)
        if port is not None:
            pool.registries.serve(port)
        pool.run(publish=_pool_channel(args.namespace, args.report_file))
        return 0
    except DeltaflowError as error:
        return failed_with(error)
    except Exception as error:
        log.exception("failed")
        return _fail(ExitCode.FAILED, failure_reason(error), f"{type(error).__name__}: {error}")
    finally:
        try:
            spark.stop()
        except Exception:  # its JVM already gone: the exit code above stands
            log.warning("stopping Spark failed", exc_info=True)


def _jvm_archive(args: argparse.Namespace) -> int:
    from deltaflow_runtime import session
    from deltaflow_runtime.jvm_archive import build_archive

    _setup_logging()
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="deltaflow-jvm-archive-"))
    conf = {
        **session.DEFAULT_CONF,
        **session.local_conf(work.resolve(), cores=2),
        **session.PINNED_CONF,
    }
    seconds = build_archive(args.output, conf, work)
    if args.work_dir is None:
        shutil.rmtree(work, ignore_errors=True)
    size = args.output.stat().st_size / 2**20
    print(f"deltaflow jvm-archive: {args.output} ({size:.0f} MiB) in {seconds:.0f}s", flush=True)
    return 0


def _metrics_port(args: argparse.Namespace) -> int | None:
    from deltaflow_api.driver_pod import ENV_METRICS_PORT
    from deltaflow_runtime.metrics import DEFAULT_METRICS_PORT

    port = args.metrics_port
    if port is None:
        port = int(os.environ.get(ENV_METRICS_PORT, DEFAULT_METRICS_PORT))
    return port or None


def _load(args: argparse.Namespace) -> Pipeline:
    if args.command == "run":
        ingestion = load_ingestion(args.filename)
        local = localize(
            ingestion,
            bootstrap_servers=args.bootstrap_servers,
            local_dir=args.local_dir,
            storage_endpoint=args.storage_endpoint,
        )
        return Pipeline.of(local)
    return Pipeline.of(load_ingestion(args.config))


def _fail(code: int, reason: FailureReason, message: str) -> int:
    from deltaflow_runtime.maintenance import write_termination_message

    print(f"deltaflow: {message}", file=sys.stderr, flush=True)
    write_termination_message({"reason": reason.value, "message": message[:3500]}, os.environ)
    return code


def failed_with(error: DeltaflowError) -> int:
    """Say why the command failed (stderr, and the termination message the operator reads);
    return its exit code."""
    return _fail(error.exit_code, error.reason, error.message)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the data-plane subcommands; returns the exit code."""
    args = build_parser().parse_args(argv)
    if args.command == "jvm-archive":
        return _jvm_archive(args)
    if args.command == "pool":
        return _pool(args)
    try:
        pipeline = _load(args)
    except DeltaflowError as error:
        return failed_with(error)
    _setup_logging()
    if args.command == "run":
        ident = pipeline.identity
        print(
            f"deltaflow run: {pipeline.ingestion.namespace}/{pipeline.ingestion.name} from "
            f"{pipeline.ingestion.spec.source.bootstrap_servers}\n  table:       {ident.table_path}"
            f"\n  dead letter: {ident.dead_letter_table_path}\n  checkpoint:  "
            f"{ident.checkpoint_path}",
            flush=True,
        )
    try:
        return _dispatch(args, pipeline)
    except DeltaflowError as error:  # raised before Spark runs (the session's master)
        return failed_with(error)


def _dispatch(args: argparse.Namespace, pipeline: Pipeline) -> int:
    from deltaflow_runtime.maintenance import check_retention, emit, run_optimize, run_vacuum
    from deltaflow_runtime.object_store import check_pipeline_access

    if args.command == "vacuum":
        # Refuse before starting a JVM.
        vac = pipeline.ingestion.spec.maintenance.vacuum
        hours = vac.retention_hours if args.retention_hours is None else args.retention_hours
        check_retention(hours, vac.allow_unsafe_retention)
    work_dir = args.local_dir.resolve() / ".spark" if args.command == "run" else None
    # Where a start's time goes, logged with the stream's start (recoveries and moves pay it).
    startup: dict[str, float] = {}
    age = process_age_seconds()
    if age is not None:
        startup["interpreter"] = age  # Python, its imports and the manifest
    stop = threading.Event()
    if args.command in ("run", "stream"):
        from deltaflow_runtime.stream import install_stop_handlers

        install_stop_handlers(stop)  # before the JVM starts: a stop during start-up is graceful
        clock = time.monotonic()
        ended = _checks_before_the_jvm(pipeline, stop)
        if ended is not None:
            return ended
        startup["kafkaPreflight"] = time.monotonic() - clock
        log.info("starting the Spark session")
    clock = time.monotonic()
    spark = _session(pipeline, args, work_dir)
    startup["sparkSession"] = time.monotonic() - clock
    try:
        clock = time.monotonic()
        if args.command in ("run", "stream"):
            from deltaflow_runtime.stream import StreamOptions, run_stream, start_checks

            start_checks(spark, pipeline)
            startup["accessChecks"] = time.monotonic() - clock

            hint = str(args.filename if args.command == "run" else args.config)
            options = StreamOptions(
                available_now=args.available_now,
                metrics_port=_metrics_port(args),
                config_hint=hint,
                config_path=args.config if args.command == "stream" else None,
                stop=stop,
                startup_seconds=startup,
            )
            runner = run_stream(spark, pipeline, options)
            if args.command == "run" and runner.writer is not None:
                _summary(spark, pipeline)
            return 0
        check_pipeline_access(spark, pipeline)
        if args.command == "optimize":
            emit(run_optimize(spark, pipeline))
            return 0
        if args.command == "vacuum":
            emit(run_vacuum(spark, pipeline, args.retention_hours))
            return 0
        return _recover(spark, pipeline)
    except DeltaflowError as error:
        return failed_with(error)
    except Exception as error:
        log.exception("failed")
        return _fail(
            ExitCode.FAILED, failure_reason(error), f"{type(error).__name__}: {str(error)[:2000]}"
        )
    finally:
        spark.stop()


def _checks_before_the_jvm(pipeline: Pipeline, stop: threading.Event) -> int | None:
    """Before the JVM: a topicPattern no regex reads (a spec mistake), then the Kafka preflight
    (a stream that cannot log in or read its topic says why in a second). None to go on, else
    the exit code (0: stopped meanwhile)."""
    from deltaflow_runtime.config import check_paths_outlive_the_pod
    from deltaflow_runtime.kafka_auth import KafkaMaterial
    from deltaflow_runtime.kafka_preflight import check_kafka
    from deltaflow_runtime.topics import check_topic_pattern

    source = pipeline.ingestion.spec.source
    try:
        # The spec's own mistakes first: they need a fix, not a restart (Java's judgement of
        # the pattern follows once the JVM runs).
        check_paths_outlive_the_pod(pipeline.ingestion)
        check_topic_pattern(None, source)
        material = KafkaMaterial.locate(source)
        if not check_kafka(source, material, pipeline.identity.consumer_group, stop=stop):
            log.info("stopped before the stream started")
            return 0
    except DeltaflowError as error:
        return failed_with(error)
    return None


def _summary(spark: SparkSession, pipeline: Pipeline) -> None:
    ident = pipeline.identity
    for label, path in (("table", ident.table_path), ("dead letter", ident.dead_letter_table_path)):
        try:
            rows = spark.read.format("delta").load(path).count()
        except Exception:
            rows = 0
        print(f"deltaflow run: {label} {path} holds {rows} rows", flush=True)


def _recover(spark: SparkSession, pipeline: Pipeline) -> int:
    from deltaflow_runtime.checkpoint import render_offsets
    from deltaflow_runtime.stream import recover_checkpoint

    recovered = recover_checkpoint(spark, pipeline)  # a RecoveryError: exit 5, its reason
    event = {
        "event": "checkpoint_recovered",
        "checkpoint": pipeline.identity.checkpoint_path,
        "batch": recovered.batch,
        "endOffsets": json.loads(render_offsets(recovered.end_offsets)),
        "replaysBatch": recovered.replayed,
    }
    print(json.dumps(event), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
