"""Turn raw readings into the policy's observation (pure): the driver's report annotation, and
two Kafka offset snapshots (the driver reads them and puts them in its report) into lag,
arrival and consumption rates.

The operator and the driver talk through annotations on the driver pod, named in
``deltaflow_api.channel`` (the runtime's side is ``deltaflow_runtime.pod_channel``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TypeVar

from deltaflow_api.channel import DESIRED_ANNOTATION
from deltaflow_operator.autoscaler.policy import Capacity, PartitionLag

# A report older than this says the driver stopped reporting (it publishes every 2 s).
REPORT_STALE_SECONDS = 30.0
# How far a report's clock may run ahead of the operator's (nodes' clocks are synchronized to
# well under this): a later time is refused, and any time is capped at when the operator saw it.
CLOCK_SKEW_SECONDS = 60.0
# Bounds of what a report may say (its figures reach the status, whose integers are int64):
# counts, Kafka's own offset and partition ranges, and figures far beyond any real driver's.
MAX_COUNT = 2**31 - 1
MAX_OFFSET = 2**63 - 1
MAX_PARTITION = 2**31 - 1
MAX_RECORDS_PER_CORE_SECOND = 1e9
MAX_SECONDS = 86_400.0
MAX_TEXT_CHARS = 500
# Rates are measured over at least this long: a reconcile right after another (a spec change)
# would otherwise divide a few records by a fraction of a second.
MIN_RATE_INTERVAL_SECONDS = 5.0

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class OffsetSnapshot:
    """Log-end and committed offsets of every partition, read at one time."""

    at: float
    end: dict[TopicPartition, int]
    committed: dict[TopicPartition, int]  # a partition the stream never committed is absent


_Part = TypeVar("_Part")
# A cost figure beyond this is no real stream's (a year of 10,000 cores, in seconds).
MAX_COST = 3.2e11
# A record's age may be far beyond a day (a stream catching up after days down): ten years.
MAX_AGE_SECONDS = 3.2e8


@dataclass(frozen=True)
class FreshnessReport:
    """The driver's measured freshness over its window (see deltaflow_runtime.freshness)."""

    window_seconds: float
    batches: int
    records: int
    trigger_seconds: float
    trigger_pinned: bool
    batch_seconds_measured: bool
    reachable: bool
    plan: str
    p50_seconds: float | None = None
    p99_seconds: float | None = None
    target_seconds: float | None = None  # spec.freshness.targetSeconds, as the driver read it
    batch_seconds: float | None = None


@dataclass(frozen=True)
class CostReport:
    """What the stream cost over the driver's window (see deltaflow_runtime.cost)."""

    window_seconds: float
    cpu_seconds_per_hour: float
    executor_seconds_per_hour: float
    records: int
    driver_memory_bytes: int
    executor_memory_bytes: int
    cpu_seconds_per_million_records: float | None = None
    executor_seconds_per_million_records: float | None = None


@dataclass(frozen=True)
class DriverReport:
    """What the driver last published about its executors and capacity."""

    at: float
    query_id: str
    run_id: str
    target: int
    registered: int
    released: int
    failed_tasks: int
    capacity: Capacity | None
    # The last batch this driver committed, and when (None: none since it started).
    last_batch: int | None = None
    last_batch_at: float | None = None
    # The driver's last Kafka poll: the offsets it read, or why it could not read them.
    kafka: OffsetSnapshot | None = None
    kafka_error: str = ""
    freshness: FreshnessReport | None = None
    cost: CostReport | None = None
    # Cores its tasks kept busy over the last minutes (None: not measured yet): how placement
    # auto compares it with a pool member's share.
    busy_cores: float | None = None
    # Why its offsets cannot be committed to its consumer group ("": they are, or not tried).
    group_commit_error: str = ""

    def fresh(self, now: float) -> bool:
        """Published recently enough to act on."""
        return now - self.at <= REPORT_STALE_SECONDS


class RefusedReportError(ValueError):
    """The report annotation holds no report the operator may act on; the message says why."""


def parse_report(text: str | None) -> DriverReport | None:
    """The report annotation, or None when absent or not a sound report (never raises).

    Only the report's own content is judged here; :func:`read_report` also judges its times
    against the operator's clock."""
    if not text:
        return None
    try:
        return _parse(text)
    except RefusedReportError:
        return None


def _parse(text: str) -> DriverReport:
    """The report in ``text``; raises :class:`RefusedReportError` for anything but a sound one.

    Anyone who may patch the driver pod can write this annotation: every number is checked
    (finite, in range) so that no value can make a later step raise or reach the status as
    something the API server refuses, which would fail every reconcile of the resource."""
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than the parser's
        raise RefusedReportError("not JSON") from None
    if not isinstance(raw, dict):
        raise RefusedReportError("not a JSON object")
    kafka = raw.get("kafka")
    if kafka is not None and not isinstance(kafka, dict):
        raise RefusedReportError("kafka is not an object")
    last_batch = raw.get("lastBatch")
    last_batch_at = raw.get("lastBatchAt")
    return DriverReport(
        at=_time(raw, "at"),
        query_id=str(raw.get("queryId", ""))[:MAX_TEXT_CHARS],
        run_id=str(raw.get("runId", ""))[:MAX_TEXT_CHARS],
        target=_count(raw, "target"),
        registered=_count(raw, "registered"),
        released=_count(raw, "released", default=0),
        failed_tasks=_count(raw, "failedTasks", default=0),
        capacity=_capacity(raw.get("capacity")),
        # -1: no batch since the driver started (what the agent sends before its first).
        last_batch=None if last_batch is None else _count(raw, "lastBatch", low=-1),
        last_batch_at=None if last_batch_at is None else _time(raw, "lastBatchAt"),
        kafka=_snapshot(kafka),
        kafka_error=str((kafka or {}).get("error") or "")[:MAX_TEXT_CHARS],
        freshness=_optional_part(_freshness, raw.get("freshness")),
        cost=_optional_part(_cost, raw.get("cost")),
        busy_cores=_busy_cores(raw),
        group_commit_error=_group_commit_error(raw),
    )


def _group_commit_error(raw: dict[str, object]) -> str:
    """A report's ``groupCommit.error`` (a driver's or a pool member's), as bounded text."""
    part = raw.get("groupCommit")
    error = part.get("error") if isinstance(part, dict) else None
    return error[:MAX_TEXT_CHARS] if isinstance(error, str) else ""


def _busy_cores(raw: dict[str, object]) -> float | None:
    """A report's ``busyCores`` (a driver's or a pool member's), within what a node has."""
    if raw.get("busyCores") is None:
        return None
    return min(max(_number(raw, "busyCores"), 0.0), 1024.0)


def _number(raw: dict[str, object], key: str, where: str = "") -> float:
    """A finite JSON number (NaN and Infinity are JSON to Python's parser, and refused here)."""
    if key not in raw:
        raise RefusedReportError(f"{where}{key} is missing")
    value = raw[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RefusedReportError(f"{where}{key} is {_shown(value)}, not a number")
    try:
        number = float(value)
    except OverflowError:  # an integer beyond any float
        raise RefusedReportError(f"{where}{key} is out of range") from None
    if not math.isfinite(number):
        raise RefusedReportError(f"{where}{key} is {_shown(value)}, not a finite number")
    return number


def _time(raw: dict[str, object], key: str, where: str = "") -> float:
    """Epoch seconds; whether the time is plausible is :func:`read_report`'s question."""
    value = _number(raw, key, where)
    if value < 0:
        raise RefusedReportError(f"{where}{key} is {_shown(raw[key])}, before 1970")
    return value


def _count(
    raw: dict[str, object],
    key: str,
    *,
    default: int | None = None,
    low: int = 0,
    high: int = MAX_COUNT,
    where: str = "",
) -> int:
    """A whole number within ``low..high`` (counts fit the status's integers)."""
    if key not in raw and default is not None:
        return default
    if key not in raw:
        raise RefusedReportError(f"{where}{key} is missing")
    value = raw[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise RefusedReportError(f"{where}{key} is {_shown(value)}, not a whole number")
    if not low <= value <= high:
        raise RefusedReportError(f"{where}{key} is {_shown(value)}, outside {low}..{high}")
    return value


def _capacity(raw: object) -> Capacity | None:
    """The report's ``capacity`` part; None while the driver has measured none."""
    if not isinstance(raw, dict):
        return None
    rate = _number(raw, "recordsPerCoreSecond", "capacity.")
    overhead = _number(raw, "batchOverheadSeconds", "capacity.")
    for key, value, high in (
        ("recordsPerCoreSecond", rate, MAX_RECORDS_PER_CORE_SECOND),
        ("batchOverheadSeconds", overhead, MAX_SECONDS),
    ):
        if not 0 <= value <= high:
            raise RefusedReportError(f"capacity.{key} is {_shown(raw[key])}, outside 0..{high:g}")
    if rate == 0:
        return None  # nothing measured yet: unknown, not zero
    return Capacity(
        records_per_core_second=rate,
        batch_overhead_seconds=overhead,
        batches=_count(raw, "batches", where="capacity."),
        fitted=bool(raw.get("fitted", True)),
        executor_start_seconds=_seconds(raw.get("executorStartSeconds")),
    )


def _seconds(raw: object) -> float | None:
    """A duration from the report: absent or not a number in 0..MAX_SECONDS is unknown."""
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        return None
    if not 0 <= raw <= MAX_SECONDS:  # False for NaN too
        return None
    return float(raw)


def _optional_part(parse: Callable[[object], _Part | None], raw: object) -> _Part | None:
    """A part the status shows but no decision needs (freshness, cost): one that is not sound
    is left out, never a reason to refuse the report the autoscaler and Ready act on."""
    try:
        return parse(raw)
    except RefusedReportError:
        return None


def _freshness(raw: object) -> FreshnessReport | None:
    """The report's ``freshness`` part; None when absent (a driver of an older release)."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise RefusedReportError("freshness is not an object")
    where = "freshness."

    def age(key: str, high: float = MAX_AGE_SECONDS, *, required: bool = False) -> float | None:
        if key not in raw and not required:
            return None
        value = _number(raw, key, where)
        if not 0 <= value <= high:
            raise RefusedReportError(f"{where}{key} is {_shown(raw[key])}, outside 0..{high:g}")
        return value

    return FreshnessReport(
        window_seconds=age("windowSeconds", MAX_SECONDS, required=True) or 0.0,
        batches=_count(raw, "batches", where=where),
        records=_count(raw, "records", high=2**63 - 1, where=where),
        # A pinned interval may be longer than a day (DURATION_PATTERN allows 25h).
        trigger_seconds=age("triggerSeconds", MAX_AGE_SECONDS, required=True) or 0.0,
        trigger_pinned=raw.get("triggerPinned") is True,
        batch_seconds_measured=raw.get("batchSecondsMeasured") is True,
        reachable=raw.get("reachable") is not False,
        plan=str(raw.get("plan") or "")[:MAX_TEXT_CHARS],
        p50_seconds=age("p50Seconds"),
        p99_seconds=age("p99Seconds"),
        target_seconds=age("targetSeconds"),
        batch_seconds=age("batchSeconds", MAX_SECONDS),
    )


def _cost(raw: object) -> CostReport | None:
    """The report's ``cost`` part; None when absent (not measured yet, or an older driver)."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise RefusedReportError("cost is not an object")
    where = "cost."

    def rate(key: str, *, required: bool = True) -> float | None:
        if key not in raw and not required:
            return None
        value = _number(raw, key, where)
        if not 0 <= value <= MAX_COST:
            raise RefusedReportError(f"{where}{key} is {_shown(raw[key])}, outside 0..{MAX_COST:g}")
        return value

    return CostReport(
        window_seconds=rate("windowSeconds") or 0.0,
        cpu_seconds_per_hour=rate("cpuSecondsPerHour") or 0.0,
        executor_seconds_per_hour=rate("executorSecondsPerHour") or 0.0,
        records=_count(raw, "records", high=2**63 - 1, where=where),
        driver_memory_bytes=_count(raw, "driverMemoryBytes", high=2**63 - 1, where=where),
        executor_memory_bytes=_count(raw, "executorMemoryBytes", high=2**63 - 1, where=where),
        cpu_seconds_per_million_records=rate("cpuSecondsPerMillionRecords", required=False),
        executor_seconds_per_million_records=rate(
            "executorSecondsPerMillionRecords", required=False
        ),
    )


def _snapshot(raw: dict[str, object] | None) -> OffsetSnapshot | None:
    """The report's ``kafka`` part: {"at", "end": {topic: {partition: offset}}, "committed"}."""
    if raw is None or "end" not in raw:
        return None

    def offsets(key: str) -> dict[TopicPartition, int]:
        part = raw.get(key, {})
        if not isinstance(part, dict) or not all(isinstance(ps, dict) for ps in part.values()):
            raise RefusedReportError(f"kafka.{key} is not {{topic: {{partition: offset}}}}")
        read: dict[TopicPartition, int] = {}
        for topic, partitions in part.items():
            where = f"kafka.{key}.{str(topic)[:100]}."
            for partition in partitions:
                if not (partition.isascii() and partition.isdigit()):
                    raise RefusedReportError(
                        f"{where}{_shown(partition)} is not a partition number"
                    )
                if int(partition) > MAX_PARTITION:
                    raise RefusedReportError(f"{where}{partition} is beyond Kafka's partitions")
                offset = _count(partitions, partition, high=MAX_OFFSET, where=where)
                read[(str(topic), int(partition))] = offset
        return read

    end = offsets("end")
    # Lag is summed into status.lag.records, an int64: offsets beyond that are no real topic's.
    if sum(end.values()) > MAX_OFFSET:
        raise RefusedReportError(
            "kafka.end: the log-end offsets add up beyond Kafka's 64-bit range"
        )
    return OffsetSnapshot(at=_time(raw, "at", "kafka."), end=end, committed=offsets("committed"))


def _shown(value: object) -> str:
    """A value as a refusal names it: short, whatever it holds."""
    text = json.dumps(value) if isinstance(value, int | float | str) else type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass(frozen=True)
class Sighting:
    """What the operator saw of one driver's report annotation, by its own clock: the text, when
    that text appeared, and when the report's batch id last moved."""

    text: str
    at: float
    batch: tuple[str, int | None] | None  # the report's (runId, lastBatch); None: refused
    batch_at: float


@dataclass(frozen=True)
class ReportReading:
    """The report the operator may act on (its times never later than when the operator saw
    them), or why there is none."""

    report: DriverReport | None
    refused: str = ""  # why the annotation was refused ("" when it was not, or is absent)
    sighting: Sighting | None = None  # what to pass as ``seen`` next round


def read_report(
    text: str | None, *, now: float, seen: Sighting | None, started_at: float | None = None
) -> ReportReading:
    """Judge the report annotation by the operator's own observation (pure; never raises).

    A report is refused when :func:`parse_report` would refuse it, when a time in it lies more
    than CLOCK_SKEW_SECONDS after ``now``, or when its own time lies before the driver container
    started (the report lives on its pod, and a new pod starts without one). What stays is
    capped: the report is no newer than when the operator first saw the annotation's text, and
    its last batch no newer than when the operator first saw that batch id. So a report written
    once, whatever times it claims, goes stale REPORT_STALE_SECONDS after the operator saw it,
    and a driver whose batch id stands still stalls, as a hung driver does: only a driver that
    keeps writing new reports, and committing new batches, looks alive.

    ``seen`` is the previous round's ``sighting``; ``started_at`` when the driver's container
    started (None: unknown).
    """
    if not text:
        return ReportReading(None)
    same_text = seen is not None and seen.text == text
    try:
        report = _parse(text)
        _check_times(report, now, started_at)
    except RefusedReportError as refused:
        sighting = seen if same_text else Sighting(text, now, None, now)
        return ReportReading(None, str(refused), sighting)
    batch = (report.run_id, report.last_batch)
    if same_text and seen is not None:
        sighting = seen
    else:
        # A batch id is new when it moved within the same query run (a new run restarts from
        # the checkpoint, possibly at the same id).
        kept = seen is not None and seen.batch == batch
        sighting = Sighting(text, now, batch, seen.batch_at if kept and seen else now)
    heard = min(report.at, sighting.at)
    batch_at = report.last_batch_at
    kafka = report.kafka
    return ReportReading(
        replace(
            report,
            at=heard,
            last_batch_at=None if batch_at is None else min(batch_at, heard, sighting.batch_at),
            kafka=None if kafka is None else replace(kafka, at=min(kafka.at, heard)),
        ),
        sighting=sighting,
    )


def _check_times(report: DriverReport, now: float, started_at: float | None) -> None:
    # Times, not ages, in the refusals: an unchanged annotation gives a byte-equal condition.
    times = {"at": report.at, "lastBatchAt": report.last_batch_at}
    if report.kafka is not None:
        times["kafka.at"] = report.kafka.at
    for key, value in times.items():
        if value is None:
            continue
        if value > now + CLOCK_SKEW_SECONDS:
            raise RefusedReportError(
                f"{key} is {_when(value)}, more than {CLOCK_SKEW_SECONDS:.0f}s ahead of the "
                "operator's clock (are the nodes' clocks synchronized?)"
            )
        # Only the report itself must be this driver's; an older batch or Kafka time only makes
        # the stream look quieter than it is, never livelier.
        if key == "at" and started_at is not None and value < started_at - CLOCK_SKEW_SECONDS:
            raise RefusedReportError(
                f"{key} is {_when(value)}, before the driver container started "
                f"({_when(started_at)}): not this driver's report"
            )


def _when(epoch_seconds: float) -> str:
    """A time for a refusal, to the second, in UTC (a number when beyond the calendar)."""
    try:
        return datetime.fromtimestamp(epoch_seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, ValueError, OSError):
        return f"{epoch_seconds:g}"


def desired_annotation(annotations: Mapping[str, str]) -> int | None:
    """The count the operator last asked a driver pod for (its annotations)."""
    value = annotations.get(DESIRED_ANNOTATION)
    try:
        return int(value) if isinstance(value, str) else None
    except ValueError:
        return None


@dataclass(frozen=True)
class KafkaView:
    """Lag and rates from two snapshots; rates are None until two snapshots exist."""

    partitions: tuple[PartitionLag, ...] | None  # None: a partition's position is unknown
    consumption_rate: float | None
    arrival_rate: float | None


def kafka_view(previous: OffsetSnapshot | None, current: OffsetSnapshot) -> KafkaView:
    """Per-partition lag and arrival rate, and the stream's consumption rate."""
    dt = current.at - previous.at if previous is not None else 0.0
    measured = previous is not None and dt > 0
    lags: list[PartitionLag] = []
    for tp, end in sorted(current.end.items()):
        committed = current.committed.get(tp)
        if committed is None:
            return KafkaView(None, None, None)
        rate = None
        if measured and previous is not None and tp in previous.end:
            rate = max(0, end - previous.end[tp]) / dt
        lags.append(PartitionLag(tp[0], tp[1], max(0, end - committed), rate))
    consumption = arrival = None
    if measured and previous is not None:
        moved = sum(
            max(0, c - previous.committed[tp])
            for tp, c in current.committed.items()
            if tp in previous.committed
        )
        consumption = moved / dt
        rates = [p.arrival_rate for p in lags if p.arrival_rate is not None]
        arrival = sum(rates) if rates else None
    return KafkaView(tuple(lags), consumption, arrival)


def with_rates(
    partitions: tuple[PartitionLag, ...] | None, measured: tuple[PartitionLag, ...] | None
) -> tuple[PartitionLag, ...] | None:
    """``partitions`` (fresh lag) with the arrival rates last measured for each partition."""
    if partitions is None:
        return None
    rates = {(p.topic, p.partition): p.arrival_rate for p in measured or ()}
    return tuple(
        PartitionLag(p.topic, p.partition, p.lag, rates.get((p.topic, p.partition)))
        for p in partitions
    )


# --- A stream pool's report of its members (deltaflow_runtime.pool, on the pool's pod) -------

POOL_PHASES = ("Starting", "Running", "BackingOff", "NeedsAction", "Invalid", "Stopped")
# A pool runs tens of members; a report naming more than this is no pool's.
MAX_POOL_MEMBERS = 1000


@dataclass(frozen=True)
class MemberReport:
    """What a pool said of one member."""

    phase: str
    failures: int
    reason: str
    message: str
    retry_at: float | None
    last_batch: int | None
    lag_records: int | None
    lag_at: float | None
    freshness: FreshnessReport | None
    busy_cores: float | None
    started_at: float | None = None  # when its query last started in the pool (epoch seconds)
    group_commit_error: str = ""  # as DriverReport's


@dataclass(frozen=True)
class PoolReport:
    """A pool's report: when, the revision of its membership it last acted on, its members
    (by ``namespace/name``; ``Stopping`` ones are listed until their thread has ended)."""

    at: float
    revision: int | None
    members: dict[str, MemberReport]


def parse_pool_report(text: str | None, namespace: str, *, now: float) -> PoolReport | None:
    """A pool pod's report annotation, or None when absent or not sound (never raises). Only
    members of ``namespace`` (the pool's) are read; a member that is not sound is left out, and
    the pool is then taken to still run it (a member is released only once gone from a sound
    report). Its time is checked against the operator's clock ``now``: more than
    CLOCK_SKEW_SECONDS ahead, it is not sound; ahead by less, it is read as made ``now`` (a report
    stamped in the future would otherwise stay newer than every later one, and never stale)."""
    if not text:
        return None
    try:
        raw = json.loads(text)
        if not isinstance(raw, dict) or not isinstance(raw.get("members"), dict):
            return None
        at = _time(raw, "at")
        if at > now + CLOCK_SKEW_SECONDS:
            return None
        at = min(at, now)
        revision_raw = raw.get("revision")
        revision = (
            int(revision_raw) if isinstance(revision_raw, str) and revision_raw.isdigit() else None
        )
    except (ValueError, RecursionError, RefusedReportError):
        return None
    members: dict[str, MemberReport] = {}
    listed: dict[str, object] = raw["members"]
    if len(listed) > MAX_POOL_MEMBERS:
        return None
    for key, entry in listed.items():
        if not isinstance(key, str) or not key.startswith(f"{namespace}/"):
            continue  # a manifest the pool could not read is listed by its file name
        member = _member_report(entry)
        if member is None:
            return None  # the pool may still run it: nothing in this report is trusted
        members[key] = member
    return PoolReport(at=at, revision=revision, members=members)


def _member_report(raw: object) -> MemberReport | None:
    if not isinstance(raw, dict):
        return None
    phase = raw.get("phase")
    if phase not in (*POOL_PHASES, "Stopping"):  # Stopping: told to stop, its thread not ended
        return None
    try:
        failures = _count(raw, "failures", default=0)
        last_batch = raw.get("lastBatch")
        lag = raw.get("lag")
        lag_records = lag_at = None
        if isinstance(lag, dict):
            lag_records = _count(lag, "records", high=MAX_OFFSET, where="lag.")
            lag_at = _time(lag, "at", "lag.")
        retry_at = raw.get("retryAt")
        started_at = raw.get("startedAt")
        return MemberReport(
            phase=str(phase),
            failures=failures,
            reason=str(raw.get("reason") or "")[:MAX_TEXT_CHARS],
            message=str(raw.get("message") or "")[:MAX_TEXT_CHARS],
            retry_at=None if retry_at is None else _time(raw, "retryAt"),
            last_batch=None if last_batch is None else _count(raw, "lastBatch", low=-1),
            lag_records=lag_records,
            lag_at=lag_at,
            freshness=_optional_part(_freshness, raw.get("freshness")),
            busy_cores=_busy_cores(raw),
            started_at=None if started_at is None else _time(raw, "startedAt"),
            group_commit_error=_group_commit_error(raw),
        )
    except RefusedReportError:
        return None
