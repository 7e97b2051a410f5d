"""The maintenance jobs the operator's CronJobs run: OPTIMIZE and VACUUM, on the table and on the
dead-letter table.

Both are safe next to the running stream: the stream only appends (blind appends never conflict
with a compaction), and VACUUM keeps Delta's retention check on, so files that readers or an
in-flight write still need are kept. Each job reports what it did as one JSON object per table on
stdout and, for Kubernetes, in the container's termination message (read it from the Job's pod:
the operator does not watch Jobs).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deltaflow_api.failures import FailureReason
from deltaflow_runtime.checkpoint import Checkpoint, HadoopDir
from deltaflow_runtime.config import Pipeline
from deltaflow_runtime.errors import DeltaflowError, ExitCode, InvalidSpecError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("deltaflow.maintenance")

SAFE_RETENTION_HOURS = 168
ENV_TERMINATION_LOG = "DELTAFLOW_TERMINATION_LOG"
DEFAULT_TERMINATION_LOG = "/dev/termination-log"
TERMINATION_LOG_LIMIT = 4096  # bytes Kubernetes keeps of a termination message


class UnsafeRetentionError(DeltaflowError):
    """VACUUM was asked for a retention under 168 h without the explicit override."""

    reason = FailureReason.VACUUM_REFUSED
    exit_code = ExitCode.REFUSED


class MaintenanceConfigError(InvalidSpecError):
    """The maintenance spec cannot work on this table; the message names the field."""


@dataclass
class MaintenanceReport:
    """What one job did to one table (one Event for the operator)."""

    operation: str  # optimize | vacuum
    table: str
    reason: str  # Event reason: OptimizeCompleted, VacuumCompleted, ...Skipped
    message: str
    files_added: int = 0
    files_removed: int = 0
    bytes_added: int = 0
    bytes_removed: int = 0
    partitions: int = 0
    duration_seconds: float = 0.0
    table_version: int | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def to_event(self) -> dict[str, Any]:
        """camelCase JSON, as the operator reads it."""
        raw = asdict(self)
        return {_camel(k): v for k, v in raw.items()}


def _camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(p.title() for p in rest)


def human_bytes(n: int) -> str:
    """1536 -> '1.5 KiB'."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def partition_predicate(partitions: Iterable[Mapping[str, str | None]]) -> str:
    """A SQL predicate matching exactly the given partitions (OR of ANDs)."""

    def literal(value: str) -> str:
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"

    clauses = []
    for values in partitions:
        terms = [
            f"`{col}` IS NULL" if v is None else f"`{col}` = {literal(v)}"
            for col, v in sorted(values.items())
        ]
        clauses.append("(" + " AND ".join(terms) + ")")
    return " OR ".join(sorted(set(clauses)))


def partitions_added(commit_json: str) -> list[dict[str, str | None]]:
    """Partition values of the data files a commit added."""
    out = []
    for line in commit_json.splitlines():
        if '"add"' not in line:
            continue
        add = json.loads(line).get("add")
        if add and add.get("dataChange", True):
            out.append(dict(add.get("partitionValues") or {}))
    return out


def _table_exists(spark: SparkSession, path: str) -> bool:
    return HadoopDir(spark, f"{path.rstrip('/')}/_delta_log").exists()


def _recent_partitions(spark: SparkSession, path: str) -> list[dict[str, str | None]] | None:
    """Partitions written since the last OPTIMIZE (None: all of them, because the table was
    never optimized or a commit since is no longer in the log to say what it wrote)."""
    from delta.tables import DeltaTable

    history = DeltaTable.forPath(spark, path).history().select("version", "operation").collect()
    current = max(int(r["version"]) for r in history)
    optimized = [int(r["version"]) for r in history if r["operation"] == "OPTIMIZE"]
    if not optimized:
        return None
    log_dir = HadoopDir(spark, f"{path.rstrip('/')}/_delta_log")
    seen: dict[str, dict[str, str | None]] = {}
    for version in range(max(optimized) + 1, current + 1):
        text = log_dir.read(f"{version:020d}.json")
        if text is None:  # log retention removed it: what it wrote is unknown
            log.warning(
                "%s: commit %d is not in the log; optimizing every partition", path, version
            )
            return None
        for values in partitions_added(text):
            seen[json.dumps(values, sort_keys=True)] = values
    return list(seen.values())


def optimize_table(
    spark: SparkSession,
    path: str,
    *,
    partition_by: list[str],
    z_order_by: list[str],
    recent_partitions_only: bool,
) -> MaintenanceReport:
    """OPTIMIZE one table (bin-packing, or Z-ORDER by the given columns)."""
    from delta.tables import DeltaTable

    started = time.monotonic()
    if not _table_exists(spark, path):
        return MaintenanceReport("optimize", path, "OptimizeSkipped", f"{path}: no table yet")
    clashes = sorted(set(z_order_by) & set(partition_by))
    if clashes:
        raise MaintenanceConfigError(
            "spec.maintenance.optimize.zOrderBy: cannot Z-ORDER by partition column(s) "
            + ", ".join(clashes)
        )
    builder = DeltaTable.forPath(spark, path).optimize()
    scope = "the whole table"
    if recent_partitions_only and partition_by:
        recent = _recent_partitions(spark, path)
        if recent is not None:
            if not recent:
                return MaintenanceReport(
                    "optimize",
                    path,
                    "OptimizeSkipped",
                    f"OPTIMIZE of {path}: no partition was written since the last OPTIMIZE",
                    duration_seconds=round(time.monotonic() - started, 3),
                )
            builder = builder.where(partition_predicate(recent))
            scope = f"{len(recent)} partition(s) written since the last OPTIMIZE"
    result = builder.executeZOrderBy(*z_order_by) if z_order_by else builder.executeCompaction()
    metrics = result.collect()[0]["metrics"].asDict(recursive=True)
    added, removed = metrics.get("filesAdded") or {}, metrics.get("filesRemoved") or {}
    report = MaintenanceReport(
        operation="optimize",
        table=path,
        reason="OptimizeCompleted",
        message="",
        files_added=int(metrics.get("numFilesAdded") or 0),
        files_removed=int(metrics.get("numFilesRemoved") or 0),
        bytes_added=int(added.get("totalSize") or 0),
        bytes_removed=int(removed.get("totalSize") or 0),
        partitions=int(metrics.get("partitionsOptimized") or 0),
        duration_seconds=round(time.monotonic() - started, 3),
        table_version=_version(spark, path),
        details={"zOrderBy": z_order_by, "scope": scope},
    )
    how = f"Z-ORDER by {', '.join(z_order_by)}" if z_order_by else "bin-packing"
    report.message = (
        f"OPTIMIZE ({how}, {scope}) of {path}: {report.files_removed} files "
        f"({human_bytes(report.bytes_removed)}) compacted into {report.files_added} "
        f"({human_bytes(report.bytes_added)}) in {report.partitions} partition(s), "
        f"{report.duration_seconds:.1f} s"
    )
    return report


def _version(spark: SparkSession, path: str) -> int:
    from delta.tables import DeltaTable

    return int(DeltaTable.forPath(spark, path).history(1).collect()[0]["version"])


def check_retention(retention_hours: float, allow_unsafe: bool) -> None:
    """Refuse a retention under 168 h unless the spec explicitly allows it."""
    if retention_hours < SAFE_RETENTION_HOURS and not allow_unsafe:
        raise UnsafeRetentionError(
            f"VACUUM with retentionHours {retention_hours:g} is under {SAFE_RETENTION_HOURS} h: "
            "it can delete files that readers and stream restarts still need (time travel, "
            "in-flight writes). Raise spec.maintenance.vacuum.retentionHours, or set "
            "spec.maintenance.vacuum.allowUnsafeRetention: true if you accept that."
        )


# An unsafe VACUUM never removes files younger than this, nor than the batch in flight: the
# stream's uncommitted data files look like garbage to VACUUM. Files written after VACUUM lists
# the table are not listed; this margin covers a batch planned between reading the checkpoint and
# that listing, and clock skew between the stream's and the job's hosts.
IN_FLIGHT_MARGIN_HOURS = 0.25


def unsafe_vacuum_retention(
    requested_hours: float,
    in_flight_since_ms: int | None,
    now_ms: int,
    margin_hours: float = IN_FLIGHT_MARGIN_HOURS,
) -> tuple[float, str]:
    """The retention an unsafe VACUUM (under 168 h) runs with so that it cannot delete the files
    of a write in flight, and why it was raised ("" when it was not)."""
    if requested_hours >= SAFE_RETENTION_HOURS:
        return requested_hours, ""
    # Delta's VACUUM rounds the retention to whole hours (0.25 h is 0 h): round up instead.
    floor = margin_hours
    if in_flight_since_ms is not None:
        floor += max(0, now_ms - in_flight_since_ms) / 3_600_000
    floor = float(math.ceil(floor))
    if requested_hours >= floor:
        return float(math.ceil(requested_hours)), ""
    why = (
        f"a batch has been in flight for {max(0, now_ms - in_flight_since_ms) / 60_000:.1f} min"
        if in_flight_since_ms is not None
        else "a batch may start while VACUUM lists the table"
    )
    return floor, (
        f"retention raised from {requested_hours:g} h to {floor:g} h: {why}, and VACUUM must "
        "not delete the files of a write in flight"
    )


LISTING_PARALLELISM = "spark.sql.sources.parallelPartitionDiscovery.parallelism"


def listing_parallelism(spark: SparkSession) -> int:
    """Tasks for VACUUM's file listing: a few per core. Spark's default (10000) makes VACUUM
    of a small table run ~170k tasks (25 s instead of 3 s on two cores)."""
    return max(8, 4 * spark.sparkContext.defaultParallelism)


def vacuum_table(
    spark: SparkSession,
    path: str,
    *,
    retention_hours: float,
    allow_unsafe: bool,
    parallelism: int | None = None,
    in_flight_since_ms: int | None = None,
    in_flight_margin_hours: float = IN_FLIGHT_MARGIN_HOURS,
) -> MaintenanceReport:
    """VACUUM one table with Delta's retention check on (off only with the explicit override;
    then never below what the write in flight, ``in_flight_since_ms``, needs).
    ``parallelism``: tasks for the file listing (default :func:`listing_parallelism`)."""
    from delta.tables import DeltaTable

    check_retention(retention_hours, allow_unsafe)
    started = time.monotonic()
    if not _table_exists(spark, path):
        return MaintenanceReport("vacuum", path, "VacuumSkipped", f"{path}: no table yet")
    retention_hours, raised = unsafe_vacuum_retention(
        retention_hours, in_flight_since_ms, int(time.time() * 1000), in_flight_margin_hours
    )
    if raised:
        log.warning("%s: %s", path, raised)
    check_key = "spark.databricks.delta.retentionDurationCheck.enabled"
    unsafe = retention_hours < SAFE_RETENTION_HOURS
    if unsafe:
        log.warning("VACUUM under %s h: Delta's retention check is off", SAFE_RETENTION_HOURS)
        spark.conf.set(check_key, "false")
    previous = spark.conf.get(LISTING_PARALLELISM)
    spark.conf.set(LISTING_PARALLELISM, str(parallelism or listing_parallelism(spark)))
    try:
        table = DeltaTable.forPath(spark, path)
        before = _version(spark, path)
        table.vacuum(retention_hours)
    finally:
        spark.conf.set(check_key, "true")
        spark.conf.set(LISTING_PARALLELISM, str(previous))
    rows = (
        DeltaTable.forPath(spark, path)
        .history()
        .where(f"version > {before}")
        .select("operation", "operationMetrics")
        .collect()
    )
    metrics: dict[str, str] = {}
    for row in rows:
        if str(row["operation"]).startswith("VACUUM"):
            metrics.update(row["operationMetrics"] or {})
    report = MaintenanceReport(
        operation="vacuum",
        table=path,
        reason="VacuumCompleted",
        message="",
        files_removed=int(metrics.get("numDeletedFiles") or metrics.get("numFilesToDelete") or 0),
        bytes_removed=int(metrics.get("sizeOfDataToDelete") or 0),
        duration_seconds=round(time.monotonic() - started, 3),
        table_version=_version(spark, path),
        details={"retentionHours": retention_hours, "unsafeRetention": unsafe},
    )
    report.message = (
        f"VACUUM (retention {retention_hours:g} h) of {path}: removed {report.files_removed} "
        f"files ({human_bytes(report.bytes_removed)}), {report.duration_seconds:.1f} s"
        + (f"; {raised}" if raised else "")
    )
    return report


def run_optimize(spark: SparkSession, pipeline: Pipeline) -> list[MaintenanceReport]:
    """OPTIMIZE the table and the dead-letter table as the spec says."""
    spec = pipeline.ingestion.spec
    opt = spec.maintenance.optimize
    return [
        optimize_table(
            spark,
            pipeline.identity.table_path,
            partition_by=list(spec.sink.partition_by),
            z_order_by=list(opt.z_order_by),
            recent_partitions_only=opt.recent_partitions_only,
        ),
        optimize_table(
            spark,
            pipeline.identity.dead_letter_table_path,
            partition_by=[],
            z_order_by=[],
            recent_partitions_only=False,
        ),
    ]


def run_vacuum(
    spark: SparkSession, pipeline: Pipeline, retention_hours: float | None = None
) -> list[MaintenanceReport]:
    """VACUUM the table and the dead-letter table with the spec's retention."""
    spec = pipeline.ingestion.spec
    vac = spec.maintenance.vacuum
    hours = vac.retention_hours if retention_hours is None else retention_hours
    chosen = spec.spark_conf.get(LISTING_PARALLELISM)  # the spec's own choice wins
    in_flight = (
        Checkpoint(spark, pipeline.identity.checkpoint_path).in_flight_since_ms()
        if hours < SAFE_RETENTION_HOURS
        else None
    )
    return [
        vacuum_table(
            spark,
            path,
            retention_hours=hours,
            allow_unsafe=vac.allow_unsafe_retention,
            parallelism=int(chosen) if chosen else None,
            in_flight_since_ms=in_flight,
        )
        for path in (pipeline.identity.table_path, pipeline.identity.dead_letter_table_path)
    ]


def emit(reports: list[MaintenanceReport], env: Mapping[str, str] | None = None) -> None:
    """Print one JSON line per report and write them as the container's termination message."""
    e = os.environ if env is None else env
    events = [r.to_event() for r in reports]
    for event in events:
        print(json.dumps({"event": "maintenance", **event}, separators=(",", ":")), flush=True)
    write_termination_message({"events": events}, e)


def write_termination_message(payload: Mapping[str, Any], env: Mapping[str, str]) -> None:
    """Best effort: Kubernetes shows this file as the container's termination message."""
    explicit = env.get(ENV_TERMINATION_LOG)
    target = Path(explicit or DEFAULT_TERMINATION_LOG)
    if not explicit and not target.exists():
        return  # Kubernetes creates /dev/termination-log in every container; elsewhere, skip
    text = json.dumps(payload, separators=(",", ":"))
    if len(text.encode()) > TERMINATION_LOG_LIMIT:
        events = payload.get("events")
        if isinstance(events, list):
            short = {"events": [{k: v for k, v in ev.items() if k != "details"} for ev in events]}
            text = json.dumps(short, separators=(",", ":"))[:TERMINATION_LOG_LIMIT]
        else:
            text = text[:TERMINATION_LOG_LIMIT]
    with contextlib.suppress(OSError):  # not writable: stdout carries the same
        target.write_text(text, encoding="utf-8")
