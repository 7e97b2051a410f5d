"""What one executor core can do, measured from the stream's own batches (pure).

The autoscaler sizes executors from this, as DS2 does from "true processing rates": records per
*busy* task-slot second (task time, summed over the batch's tasks, from Spark's status store) is
what one core does when it works, whatever the load; the wall time a batch takes beyond its
parallel busy time is the fixed per-batch cost (planning, the Delta commit, the consumer-group
commit) that more executors do not shorten. Ratios of sums over a window of recent batches, so
a busy sample attributed to the neighbouring batch evens out.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class BatchSample:
    """One batch as the driver saw it."""

    records: int
    wall_seconds: float  # Spark's triggerExecution
    busy_core_seconds: float  # task time of the batch's tasks, summed
    slots: int  # executor cores registered while it ran
    partitions: int  # Kafka partitions (one task each per read)


@dataclass(frozen=True)
class MeasuredCapacity:
    """The figures the operator's autoscaler sizes from."""

    records_per_core_second: float
    batch_overhead_seconds: float
    batches: int


def effective_parallelism(slots: int, partitions: int) -> float:
    """Tasks run in waves: P tasks on S slots take ceil(P/S) waves, so P/waves run at once."""
    if slots <= 0:
        return 0.0
    if partitions <= 0:
        return float(slots)
    return partitions / math.ceil(partitions / slots)


def _parallelism(sample: BatchSample) -> float:
    return effective_parallelism(sample.slots, sample.partitions)


class CapacityMeter:
    """A sliding window of batch samples and the capacity they show."""

    def __init__(self, window: int = 30, min_batches: int = 3) -> None:
        self._samples: deque[BatchSample] = deque(maxlen=window)
        self._min_batches = min_batches

    def add(self, sample: BatchSample) -> None:
        """Count a batch; empty batches say nothing about capacity and are skipped."""
        if sample.records > 0 and sample.busy_core_seconds > 0 and sample.slots > 0:
            self._samples.append(sample)

    def capacity(self) -> MeasuredCapacity | None:
        """The measured capacity, or None until enough batches carried records."""
        samples = list(self._samples)
        if len(samples) < self._min_batches:
            return None
        records = sum(s.records for s in samples)
        busy = sum(s.busy_core_seconds for s in samples)
        overheads = [
            max(
                0.0,
                s.wall_seconds - s.busy_core_seconds / effective_parallelism(s.slots, s.partitions),
            )
            for s in samples
        ]
        return MeasuredCapacity(
            records_per_core_second=records / busy,
            batch_overhead_seconds=statistics.median(overheads),
            batches=len(samples),
        )
