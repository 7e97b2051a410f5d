"""Measured freshness: each committed batch's records' ages at its Delta commit, over a window.

A batch's table pass observes its oldest and newest Kafka timestamps (two aggregates on a column
it reads anyway), so the driver knows, at the commit, the age of the batch's oldest and newest
record. Between them the records are taken as spread evenly (they are for a steady stream, where
a batch holds one interval of arrivals), which makes each batch a uniform stretch of ages
weighted by its rows; the window's percentiles are those of the mixture.

Ages use the Kafka record timestamp: the producer's clock (CreateTime) or the broker's
(LogAppendTime); an age below 0 (a producer clock ahead of the driver's) counts as 0.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

from deltaflow_api.cadence import TriggerPlan

# The most batches the window keeps (memory stays bounded whatever the cadence).
MAX_BATCHES = 512
# The batch time the trigger plans for comes from this many recent batches, at least a few.
BATCH_TIME_BATCHES = 50
MIN_BATCHES_FOR_TIME = 5
# The log-checkpoint batch time comes from the last few such batches (one in ten).
CHECKPOINT_BATCHES = 3


@dataclass(frozen=True)
class BatchAges:
    """One committed batch: when, its records' ages then (seconds), how many, how long it ran."""

    committed_at: float
    youngest: float  # the newest record's age
    oldest: float  # the oldest record's age
    rows: int
    batch_seconds: float
    log_checkpoint: bool = False  # its commit was one Delta checkpoints the log at


def ages_at_commit(
    committed_at: float,
    oldest_ms: int | None,
    newest_ms: int | None,
    rows: int,
    seconds: float,
    *,
    log_checkpoint: bool = False,
) -> BatchAges | None:
    """A batch's ages from its observed Kafka timestamps (epoch milliseconds); None without
    rows or timestamps."""
    if rows <= 0 or oldest_ms is None or newest_ms is None:
        return None
    # Kafka's "no timestamp" is -1 (and 0 is no real produce time): such a batch says nothing
    # of its freshness, and one such record must not make every percentile decades old.
    if oldest_ms <= 0 or newest_ms <= 0:
        return None
    oldest = max(0.0, committed_at - oldest_ms / 1000)
    youngest = min(oldest, max(0.0, committed_at - newest_ms / 1000))
    return BatchAges(committed_at, youngest, oldest, rows, seconds, log_checkpoint)


def share_younger(batches: list[BatchAges], age: float) -> float:
    """The share of the batches' records younger than ``age`` at their commit."""
    total = sum(b.rows for b in batches)
    if total == 0:
        return 0.0
    below = 0.0
    for b in batches:
        span = b.oldest - b.youngest
        if age >= b.oldest:
            below += b.rows
        elif age > b.youngest:
            below += b.rows * (age - b.youngest) / span
    return below / total


def age_quantile(batches: list[BatchAges], q: float) -> float | None:
    """The age under which a share ``q`` of the batches' records landed (None without records)."""
    if not batches or sum(b.rows for b in batches) == 0:
        return None
    low, high = min(b.youngest for b in batches), max(b.oldest for b in batches)
    for _ in range(60):  # bisection: the mixture's distribution is monotone
        middle = (low + high) / 2
        if share_younger(batches, middle) < q:
            low = middle
        else:
            high = middle
    return high


def steady_batch_seconds(batches: list[BatchAges]) -> float | None:
    """What a steady batch (one interval's arrivals) takes: the median wall time of the smaller
    half of the recent batches (None with too few to say). A catch-up's large batches are the
    other half: a burst neither shortens the interval nor restarts the query, while a stream
    whose every batch got slower moves its plan within a few dozen batches."""
    recent = [b for b in batches[-BATCH_TIME_BATCHES:] if not b.log_checkpoint]
    if len(recent) < MIN_BATCHES_FOR_TIME:
        return None
    smaller = sorted(recent, key=lambda b: b.rows)[: (len(recent) + 1) // 2]
    times = sorted(b.batch_seconds for b in smaller)
    return times[(len(times) - 1) // 2]  # the lower median: a cold first batch is not it


def checkpoint_batch_seconds(batches: list[BatchAges]) -> float | None:
    """What a batch whose commit Delta checkpoints the log at takes: the slowest of the last
    few (None before one): one batch in ten, so a p99 target must fit it."""
    recent = [b.batch_seconds for b in batches if b.log_checkpoint][-CHECKPOINT_BATCHES:]
    return max(recent) if recent else None


class FreshnessWindow:
    """The recent batches' ages (thread-safe: the writer adds, the reporter reads)."""

    def __init__(self, window_seconds: float) -> None:
        self.window_seconds = window_seconds
        self._batches: deque[BatchAges] = deque(maxlen=MAX_BATCHES)
        self._lock = threading.Lock()

    def add(self, ages: BatchAges) -> None:
        """One committed batch."""
        with self._lock:
            self._batches.append(ages)

    def recent(self, now: float) -> list[BatchAges]:
        """The batches committed within the window before ``now``."""
        with self._lock:
            return [b for b in self._batches if now - b.committed_at <= self.window_seconds]

    def batch_seconds(self) -> float | None:
        """The steady batch time the trigger plans for (see steady_batch_seconds)."""
        with self._lock:
            return steady_batch_seconds(list(self._batches))

    def checkpoint_batch_seconds(self) -> float | None:
        """The log-checkpoint batch time the trigger plans for (see checkpoint_batch_seconds)."""
        with self._lock:
            return checkpoint_batch_seconds(list(self._batches))

    def report(self, now: float, plan: TriggerPlan, target_seconds: float) -> dict[str, Any]:
        """The driver report's ``freshness`` part (the operator's status and condition)."""
        batches = self.recent(now)
        body: dict[str, Any] = {
            "targetSeconds": target_seconds,
            "windowSeconds": self.window_seconds,
            "batches": len(batches),
            "records": sum(b.rows for b in batches),
            "triggerSeconds": plan.interval_seconds,
            "triggerPinned": plan.pinned,
            "batchSecondsMeasured": plan.measured,
            "reachable": plan.reachable,
            "plan": plan.reason,
        }
        for key, q in (("p50Seconds", 0.5), ("p99Seconds", 0.99)):
            value = age_quantile(batches, q)
            if value is not None:
                body[key] = round(value, 2)
        steady = self.batch_seconds()
        if steady is not None:
            body["batchSeconds"] = round(steady, 2)
        return body
