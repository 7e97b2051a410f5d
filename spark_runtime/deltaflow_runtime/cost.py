"""What a stream costs, measured: CPU-seconds of all its processes and executor-seconds, per hour
and per million records, and the memory its processes hold. A platform team charges teams back
from this (``status.cost``).

- The driver: its Python process and its JVM, read from procfs (both processes of the driver pod;
  in local mode the JVM runs the tasks too).
- The executors: each executor JVM's CPU time and resident memory, sent to the driver by the
  runtime's Spark plugin (``io.deltaflow.cost.ProcessCostPlugin``, spark_runtime/jvm), read over
  py4j; an executor that left still counts what it used.
- Executor-seconds: the registered executors, integrated over time.

Rates come from the first and last samples of a window (ten minutes): per hour of wall time, and
per million records landed in it.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The plugin's class, added to spark.plugins by the session (session.runtime_conf).
COST_PLUGIN = "io.deltaflow.cost.ProcessCostPlugin"
WINDOW_SECONDS = 600.0
# An executor whose last report is older than this no longer counts toward memory.
EXECUTOR_FRESH_MILLIS = 15_000
_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class ProcessFigures:
    """CPU seconds used so far and resident bytes now, of some processes."""

    cpu_seconds: float
    rss_bytes: int


def process_figures(pids: list[int], proc: Path = Path("/proc")) -> ProcessFigures:
    """The CPU time (user + system, and that of children they waited for) and resident memory
    of ``pids`` from procfs; a process that is gone counts 0."""
    cpu, rss = 0.0, 0
    for pid in pids:
        try:
            stat = (proc / str(pid) / "stat").read_text()
        except OSError:
            continue
        # The command name (field 2) may hold spaces and parentheses: fields after its last ')'.
        fields = stat[stat.rindex(")") + 2 :].split()
        utime, stime, cutime, cstime = (int(f) for f in fields[11:15])
        cpu += (utime + stime + cutime + cstime) / _TICKS
        rss += int(fields[21]) * _PAGE
    return ProcessFigures(cpu, rss)


def process_age_seconds(proc: Path = Path("/proc")) -> float | None:
    """Seconds since this process started (procfs, in clock ticks); None where unreadable."""
    try:
        stat = (proc / "self" / "stat").read_text()
        uptime = float((proc / "uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    started = int(stat[stat.rindex(")") + 2 :].split()[19]) / _TICKS  # field 22: starttime
    return max(0.0, uptime - started)


@dataclass(frozen=True)
class CostSample:
    """Running totals at one time."""

    at: float
    driver_cpu_seconds: float
    executor_cpu_seconds: float
    executor_seconds: float  # registered executors x seconds
    records: int  # landed (table and dead-letter table)
    driver_rss_bytes: int
    executor_rss_bytes: int


def cost_between(first: CostSample, last: CostSample) -> dict[str, Any] | None:
    """The report's ``cost`` part from two samples (None when no time passed between them):
    per hour of wall time, per million records landed (absent without records), memory now."""
    seconds = last.at - first.at
    if seconds <= 0:
        return None
    cpu = (last.driver_cpu_seconds - first.driver_cpu_seconds) + (
        last.executor_cpu_seconds - first.executor_cpu_seconds
    )
    executor = last.executor_seconds - first.executor_seconds
    records = last.records - first.records
    body: dict[str, Any] = {
        "windowSeconds": round(seconds, 1),
        "cpuSecondsPerHour": round(max(cpu, 0.0) * 3600 / seconds, 1),
        "executorSecondsPerHour": round(max(executor, 0.0) * 3600 / seconds, 1),
        "records": records,
        "driverMemoryBytes": last.driver_rss_bytes,
        "executorMemoryBytes": last.executor_rss_bytes,
    }
    if records > 0:
        body["cpuSecondsPerMillionRecords"] = round(max(cpu, 0.0) * 1e6 / records, 1)
        body["executorSecondsPerMillionRecords"] = round(max(executor, 0.0) * 1e6 / records, 1)
    return body


class CostMeter:
    """Samples the stream's running totals; reports over the last window (thread-safe)."""

    def __init__(self, window_seconds: float = WINDOW_SECONDS) -> None:
        self.window_seconds = window_seconds
        self._samples: deque[CostSample] = deque()
        self._lock = threading.Lock()
        self._executor_seconds = 0.0
        self._last_at: float | None = None
        self._registered = 0

    def sample(
        self,
        at: float,
        *,
        driver: ProcessFigures,
        executor_cpu_seconds: float,
        executor_rss_bytes: int,
        registered_executors: int,
        records: int,
    ) -> None:
        """Add the totals read at ``at``; executors registered now are counted from the last
        sample on (the count in between is not known finer than the sampling)."""
        with self._lock:
            if self._last_at is not None and at > self._last_at:
                self._executor_seconds += self._registered * (at - self._last_at)
            self._last_at, self._registered = at, registered_executors
            self._samples.append(
                CostSample(
                    at,
                    driver.cpu_seconds,
                    executor_cpu_seconds,
                    self._executor_seconds,
                    records,
                    driver.rss_bytes,
                    executor_rss_bytes,
                )
            )
            while len(self._samples) > 2 and at - self._samples[1].at >= self.window_seconds:
                self._samples.popleft()

    def report(self) -> dict[str, Any] | None:
        """The cost over the window's samples (None before two)."""
        with self._lock:
            if len(self._samples) < 2:
                return None
            return cost_between(self._samples[0], self._samples[-1])


def executor_figures(spark: Any) -> tuple[float, int]:
    """(CPU seconds of every executor so far, resident bytes of the running ones) from the
    runtime's Spark plugin; (0, 0) where it is not loaded (a session without the runtime's
    jar), so the cost shows the driver alone rather than failing the stream."""
    from deltaflow_runtime.jvm import jvm

    try:
        plugin = jvm(spark).io.deltaflow.cost.ProcessCostPlugin
        return float(plugin.executorCpuSeconds()), int(
            plugin.executorRssBytes(EXECUTOR_FRESH_MILLIS)
        )
    except Exception:  # py4j: the class is missing
        return 0.0, 0


def jvm_pid(spark: Any) -> int | None:
    """The driver JVM's process id (py4j asks the JVM itself)."""
    from deltaflow_runtime.jvm import jvm

    try:
        return int(jvm(spark).java.lang.ProcessHandle.current().pid())
    except Exception:
        return None


# The stream pool's listener of task time per scheduler pool (spark_runtime/jvm).
POOL_TASK_TIME = "io.deltaflow.cost.PoolTaskTime"
# A member's load is measured over this window (minutes: a trickle's batches are seconds apart).
LOAD_WINDOW_SECONDS = 300.0


def install_pool_task_time(spark: Any) -> bool:
    """Count task time per scheduler pool in this JVM (a stream pool's members' load); whether
    the runtime's jar is there to do it."""
    from deltaflow_runtime.jvm import jvm, scala_context

    try:
        jvm(spark).io.deltaflow.cost.PoolTaskTime.install(scala_context(spark))
        return True
    except Exception:  # py4j: the class is missing (a session without the runtime's jar)
        return False


def pool_busy_seconds(spark: Any) -> dict[str, float] | None:
    """Task seconds the jobs of each scheduler pool ran so far (a pool not in it ran none);
    None if the JVM cannot say (a py4j failure is no reading, never a 0)."""
    from deltaflow_runtime.jvm import jvm

    try:
        lines = str(jvm(spark).io.deltaflow.cost.PoolTaskTime.busySeconds())
        busy: dict[str, float] = {}
        for line in lines.splitlines():
            pool, _, seconds = line.rpartition("\t")
            busy[pool] = float(seconds)
        return busy
    except Exception:
        return None


class LoadMeter:
    """Busy task seconds per second (cores kept busy) over the last window, from samples of a
    running total (thread-safe)."""

    def __init__(self, window_seconds: float = LOAD_WINDOW_SECONDS) -> None:
        self.window_seconds = window_seconds
        self._samples: deque[tuple[float, float]] = deque()
        self._lock = threading.Lock()

    def sample(self, at: float, busy_seconds: float) -> None:
        with self._lock:
            self._samples.append((at, busy_seconds))
            while len(self._samples) > 2 and at - self._samples[1][0] >= self.window_seconds:
                self._samples.popleft()

    def cores(self, min_span_seconds: float = 30.0) -> float | None:
        """Cores kept busy over the window; None before it spans ``min_span_seconds``."""
        with self._lock:
            if len(self._samples) < 2:
                return None
            (first_at, first), (last_at, last) = self._samples[0], self._samples[-1]
        span = last_at - first_at
        if span < min_span_seconds:
            return None
        return max(0.0, last - first) / span
