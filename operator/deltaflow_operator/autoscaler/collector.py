"""Observe, with memory: what the operator has seen of each stream's driver report and Kafka
offsets across rounds (Flink's autoscaler keeps the same in its metric collector).

The report is judged once per round (:func:`~deltaflow_operator.autoscaler.observe.read_report`);
rates need two distinct offset polls, so the last poll and the last measured view are kept per
resource. Nothing here survives a restart: after one, the first round measures and holds. Pure
but for that memory: no Kubernetes, no API models.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from deltaflow_operator.autoscaler.observe import (
    MIN_RATE_INTERVAL_SECONDS,
    DriverReport,
    KafkaView,
    OffsetSnapshot,
    ReportReading,
    Sighting,
    kafka_view,
    read_report,
    with_rates,
)

log = logging.getLogger(__name__)

# A Kafka view older than this is not acted on (the driver polls every 5 s): the broker or the
# driver is treated as unreachable.
VIEW_STALE_SECONDS = 60.0


@dataclass(frozen=True)
class Stream:
    """Which resource a reading belongs to; a new uid is a new incarnation (fresh memory)."""

    namespace: str
    name: str
    uid: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass
class _Memory:
    """One resource's readings: the rate baseline, the last Kafka view and its time, and what
    the operator saw of the driver's report (by its own clock)."""

    uid: str
    baseline: tuple[OffsetSnapshot, KafkaView] | None = None
    view: KafkaView | None = None
    view_at: float = 0.0
    error: str = ""
    sighting: Sighting | None = None


class Collector:
    """The readings of every stream this operator serves; safe across threads."""

    def __init__(self) -> None:
        self._memory: dict[str, _Memory] = {}
        self._lock = threading.Lock()

    def _of(self, stream: Stream) -> _Memory:
        """The stream's memory (call with the lock held); new for a new incarnation."""
        memory = self._memory.get(stream.key)
        if memory is None or memory.uid != stream.uid:
            memory = self._memory[stream.key] = _Memory(stream.uid)
        return memory

    def read_report(
        self, stream: Stream, text: str | None, started_at: float | None, now: float
    ) -> ReportReading:
        """The driver's report annotation as the operator judges it; a refusal is logged once."""
        with self._lock:
            memory = self._of(stream)
            seen = memory.sighting
            reading = read_report(text, now=now, seen=seen, started_at=started_at)
            memory.sighting = reading.sighting
        if reading.refused and reading.sighting is not seen:
            log.warning("the driver report of %s is refused: %s", stream.key, reading.refused)
        return reading

    def kafka(
        self, stream: Stream, report: DriverReport | None, now: float
    ) -> tuple[KafkaView | None, str]:
        """The freshest Kafka view (None when there is none recent) and the driver's last Kafka
        error; a snapshot is used once, so rates span two distinct polls."""
        with self._lock:
            memory = self._of(stream)
            if report is not None and report.kafka is not None:
                if memory.baseline is None or report.kafka.at > memory.view_at:
                    _advance(memory, report.kafka)
            elif report is not None and report.kafka_error:
                memory.error = report.kafka_error
            fresh = memory.view is not None and now - memory.view_at <= VIEW_STALE_SECONDS
            return (memory.view if fresh else None), memory.error

    def forget(self, namespace: str, name: str) -> None:
        """Drop what is kept of a deleted resource."""
        with self._lock:
            self._memory.pop(f"{namespace}/{name}", None)


def _advance(memory: _Memory, snapshot: OffsetSnapshot) -> None:
    base = memory.baseline
    if base is not None and snapshot.at - base[0].at < MIN_RATE_INTERVAL_SECONDS:
        # Too soon for a rate: this read's lag with the last measured rates, per partition too
        # (without them every round between two measurements would be Unknown).
        lag = kafka_view(None, snapshot)
        memory.view = KafkaView(
            with_rates(lag.partitions, base[1].partitions),
            base[1].consumption_rate,
            base[1].arrival_rate,
        )
    else:
        memory.view = kafka_view(base[0] if base is not None else None, snapshot)
        memory.baseline = (snapshot, memory.view)
    memory.view_at, memory.error = snapshot.at, ""
