"""What one executor core can do, measured from the stream's own batches (pure).

The autoscaler sizes executors from this, as DS2 does from "true processing rates": task time
(summed over a batch's tasks, from Spark's status store) is what the batch cost in cores. Part of
it does not depend on the batch's size (Delta's log replay, task start-up), so a batch's busy time
is fitted as ``fixed + records / rate`` by least squares over recent batches: the slope gives the
records one busy core processes per second. While the batches are all about the same size the
slope cannot be told from the fixed part, and records / busy time is used: a lower bound (it
counts the fixed part as work), so the autoscaler errs towards more executors, never fewer. The
largest batches the driver has run are kept besides the recent ones, so one backlog teaches the
meter the slope for good.

The wall time a batch takes beyond its records' parallel work is the per-batch overhead
(planning, the Delta commit, the consumer-group commit) that more executors do not shorten.
"""

from __future__ import annotations

import heapq
import math
import statistics
from collections import deque
from dataclasses import dataclass

# Records of the largest batch must be at least this multiple of the smallest for the fit.
SPREAD_FOR_FIT = 3.0
# ...and the slope must stand out of the noise: busy time follows the records this closely
# (R² of the fit), or the slope is this many standard errors from zero. R² alone refuses the
# usual good case, many batches of one size and a few large ones: their slope is precise but
# the same-size batches' noise is most of the variance (the node bench's calibration, 18
# batches of ~4k records and one of 60k, stayed a lower bound). The t-statistic refuses what R²
# was added for, a slope that barely rises out of the noise (an early fit once reported 503k
# rec/s per core against 34k measured later).
MIN_FIT_R2 = 0.8
MIN_SLOPE_T = 4.0


@dataclass(frozen=True)
class BatchSample:
    """One batch as the driver saw it."""

    records: int
    wall_seconds: float  # Spark's triggerExecution
    busy_core_seconds: float  # task time of the batch's tasks, summed
    slots: int  # executor cores registered while it ran
    partitions: int  # tasks that read the batch (Kafka partitions, or minPartitions)


@dataclass(frozen=True)
class MeasuredCapacity:
    """The figures the operator's autoscaler sizes from."""

    records_per_core_second: float
    batch_overhead_seconds: float
    batches: int
    fitted: bool  # False: records / busy time, a lower bound (batches of one size so far)


def effective_parallelism(slots: int, partitions: int) -> float:
    """Tasks run in waves: P tasks on S slots take ceil(P/S) waves, so P/waves run at once."""
    if slots <= 0:
        return 0.0
    if partitions <= 0:
        return float(slots)
    return partitions / math.ceil(partitions / slots)


def _parallelism(sample: BatchSample) -> float:
    return effective_parallelism(sample.slots, sample.partitions)


def _slope_rate(samples: list[BatchSample]) -> float | None:
    """Records per busy core-second from the fit busy = fixed + records / rate, or None."""
    records = [float(s.records) for s in samples]
    if min(records) * SPREAD_FOR_FIT > max(records):
        return None
    mean_r = statistics.fmean(records)
    mean_b = statistics.fmean(s.busy_core_seconds for s in samples)
    var = sum((r - mean_r) ** 2 for r in records)
    busy = [s.busy_core_seconds for s in samples]
    cov = sum((r - mean_r) * (b - mean_b) for r, b in zip(records, busy, strict=True))
    busy_var = sum((b - mean_b) ** 2 for b in busy)
    if var <= 0 or cov <= 0 or busy_var <= 0:
        return None
    slope = cov / var  # busy core-seconds per record
    if mean_b - slope * mean_r < 0:
        return None  # a negative fixed cost: the line does not describe these batches
    if cov * cov / (var * busy_var) >= MIN_FIT_R2:
        return 1 / slope
    # Residual variance of the fit -> standard error of the slope (needs 2 degrees of freedom).
    if len(samples) < 4:
        return None
    residual = max(0.0, busy_var - slope * cov) / (len(samples) - 2)
    if residual > 0 and slope / math.sqrt(residual / var) < MIN_SLOPE_T:
        return None
    return 1 / slope


class CapacityMeter:
    """Recent batch samples plus the largest ones, and the capacity they show."""

    def __init__(self, window: int = 30, min_batches: int = 3, largest: int = 5) -> None:
        self._recent: deque[BatchSample] = deque(maxlen=window)
        self._largest: list[tuple[int, int, BatchSample]] = []  # min-heap by records
        self._keep_largest = largest
        self._min_batches = min_batches
        self._count = 0

    def add(self, sample: BatchSample) -> None:
        """Count a batch; empty batches say nothing about capacity and are skipped."""
        if sample.records <= 0 or sample.busy_core_seconds <= 0 or sample.slots <= 0:
            return
        self._count += 1
        self._recent.append(sample)
        entry = (sample.records, self._count, sample)
        if len(self._largest) < self._keep_largest:
            heapq.heappush(self._largest, entry)
        elif sample.records > self._largest[0][0]:
            heapq.heapreplace(self._largest, entry)

    def capacity(self) -> MeasuredCapacity | None:
        """The measured capacity, or None until enough batches carried records."""
        recent = list(self._recent)
        if len(recent) < self._min_batches:
            return None
        ids = {id(s) for s in recent}
        samples = recent + [s for _, _, s in self._largest if id(s) not in ids]
        rate = _slope_rate(samples)
        fitted = rate is not None
        if rate is None:
            rate = sum(s.records for s in recent) / sum(s.busy_core_seconds for s in recent)
        overheads = [
            max(0.0, s.wall_seconds - s.records / (rate * _parallelism(s))) for s in recent
        ]
        return MeasuredCapacity(
            records_per_core_second=rate,
            batch_overhead_seconds=statistics.median(overheads),
            batches=len(samples),
            fitted=fitted,
        )


class ExecutorStartClock:
    """How long new executors take to join: from asking for them to their registration.

    Fed each agent round with the executor target, the registered count and when the newest
    registered executor registered (Spark's add time). A wait starts when the target rises above
    the registered count and ends when the count reaches it, timed to that registration rather
    than to the round that saw it. A wait that ends with no registration after it started (the
    target came down again) measures nothing. The driver's first executors are a wait from the
    SparkContext's start, so the figure is known before the first scale-up.
    """

    def __init__(self, asked_at: float | None = None) -> None:
        self._asked_at = asked_at
        self.seconds: float | None = None  # the last wait measured

    def observe(self, now: float, target: int, registered: int, newest_at: float | None) -> None:
        """One round at wall time ``now``."""
        if registered < target:
            if self._asked_at is None:
                self._asked_at = now
            return
        if self._asked_at is not None and newest_at is not None and newest_at >= self._asked_at:
            self.seconds = newest_at - self._asked_at
        self._asked_at = None
