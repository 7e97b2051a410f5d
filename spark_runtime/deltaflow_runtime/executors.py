"""Change the running driver's executor count live, through Spark's executor-allocation API.

Dynamic allocation stays off (it sizes to pending tasks and drops executors between triggers);
the target comes from the operator's autoscaler instead. On Spark's Kubernetes backend:

- grow: ``SparkContext.requestTotalExecutors`` raises the backend's target and its pod allocator
  creates the executor pods; nothing else changes (same query, same driver);
- shrink: the target is lowered first (pending pods are cancelled, nothing is replaced), then
  executors that run no task are decommissioned (``decommissionExecutors``, with Spark's
  decommission and block migration on, see the driver's Spark conf): each is taken out of the
  offers, moves its shuffle and cached blocks to the executors that stay, and exits, so no
  running task is cut short and no later stage loses the shuffle output it needs. A busy
  executor is simply tried again on the next round (batches leave idle gaps between triggers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from deltaflow_runtime.jvm import java_array, jvm, scala_context

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class ExecutorTotals:
    """Executors now, and the cumulative task figures of every executor the app has had."""

    registered: list[str]  # active executor ids (not being removed)
    cores: int  # cores of the registered executors
    busy_core_seconds: float  # task time, all executors ever, cumulative
    failed_tasks: int  # cumulative
    newest_added_at: float | None = None  # wall time the newest registered executor registered


class Executors(Protocol):
    """What the scaling agent reads and sets: executor pods (ExecutorControl) or a local-mode
    driver's own task threads (LocalExecutors)."""

    target: int
    released: int

    def totals(self) -> ExecutorTotals: ...

    def started_at(self) -> float: ...

    def set_target(self, executors: int) -> list[str]: ...


def _executor_order(executor_id: str) -> tuple[int, str]:
    return (int(executor_id), executor_id) if executor_id.isdigit() else (-1, executor_id)


class ExecutorControl:
    """The driver's executors: read the counts, set the target."""

    def __init__(self, spark: SparkSession) -> None:
        self._spark = spark
        self._java: Any = jvm(spark)
        self._sc: Any = scala_context(spark)
        conf = spark.sparkContext.getConf()
        self.target = int(conf.get("spark.executor.instances", "1") or "1")
        self.released = 0  # executors this driver released on scale-down

    def supported(self) -> bool:
        """True on a cluster backend (Kubernetes); local mode has no executors to change."""
        coarse = self._java.java.lang.Class.forName(
            "org.apache.spark.scheduler.cluster.CoarseGrainedSchedulerBackend"
        )
        return bool(coarse.isInstance(self._sc.schedulerBackend()))

    def totals(self) -> ExecutorTotals:
        """Registered executors and the cumulative busy time and failures of all executors."""
        backend = self._sc.schedulerBackend()
        ids = backend.getExecutorIds()
        registered = [
            str(ids.apply(i)) for i in range(ids.size()) if backend.isExecutorActive(ids.apply(i))
        ]
        summaries = self._sc.statusStore().executorList(False)
        busy_ms = failed = cores = 0
        newest_ms: int | None = None
        for i in range(summaries.size()):
            summary = summaries.apply(i)
            if summary.id() == "driver":
                continue
            busy_ms += int(summary.totalDuration())
            failed += int(summary.failedTasks())
            if summary.id() in registered:
                cores += int(summary.totalCores())
                added = int(summary.addTime().getTime())
                newest_ms = added if newest_ms is None else max(newest_ms, added)
        return ExecutorTotals(
            sorted(registered, key=_executor_order),
            cores,
            busy_ms / 1000,
            failed,
            None if newest_ms is None else newest_ms / 1000,
        )

    def started_at(self) -> float:
        """Wall time the SparkContext started: when the first executors were asked for."""
        return int(self._sc.startTime()) / 1000

    def set_target(self, executors: int) -> list[str]:
        """Ask for ``executors`` in total; on a shrink, release idle executors beyond it.

        Returns the ids released this call. Idempotent: called again with the same count it
        releases what was busy last time and is idle now.
        """
        # A driver on executor pods keeps one: with none it runs no task (a count of 0 is a
        # local-mode driver, which the operator starts in its place: LocalExecutors).
        executors = max(1, executors)
        if executors != self.target:
            no_locality = self._java.org.apache.spark.api.python.PythonUtils.toScalaMap(
                self._java.java.util.HashMap()
            )
            if not self._sc.requestTotalExecutors(executors, 0, no_locality):
                raise RuntimeError("the scheduler backend refused the executor target")
            self.target = executors
        registered = self.totals().registered
        excess = len(registered) - executors
        if excess <= 0:
            return []
        scheduler = self._sc.taskScheduler()
        # Newest first: the oldest executors keep their warm caches and Kafka consumers.
        idle = [e for e in reversed(registered) if not scheduler.isExecutorBusy(e)][:excess]
        if not idle:
            return []
        info = self._java.org.apache.spark.scheduler.ExecutorDecommissionInfo.apply(
            "scaled down by the Deltaflow operator", self._java.scala.Option.apply(None)
        )
        pairs = java_array(
            self._java.scala.Tuple2, [self._java.scala.Tuple2(e, info) for e in idle], self._spark
        )
        # Decommissioned, not killed: the executor takes no new task, hands its shuffle and
        # cached blocks (Delta's snapshot state among them) to the executors that stay, then
        # exits. A killed one loses them, and a later stage reading them fails a task (a node
        # benchmark counted one at a scale-down with kills). adjustTargetNumExecutors=false (the
        # target is already set), triggeredByExecutor=false.
        decommissioned = self._sc.schedulerBackend().decommissionExecutors(pairs, False, False)
        released = [str(decommissioned.apply(i)) for i in range(decommissioned.size())]
        self.released += len(released)
        return released


class LocalExecutors:
    """A driver running Spark in local mode (spec.scaling.minExecutors 0): no executor to set,
    0 registered; its task threads are the slots the capacity is measured over, and its tasks'
    time is the busy time. A count above 0 is not applied here: the operator moves the stream
    to executor pods with a new driver."""

    def __init__(self, spark: SparkSession) -> None:
        self._sc: Any = scala_context(spark)
        self.slots = int(spark.sparkContext.defaultParallelism)
        self.target = 0
        self.released = 0
        self._last = ExecutorTotals([], self.slots, 0.0, 0)

    def totals(self) -> ExecutorTotals:
        """No executors; the driver's task slots and the cumulative time of its tasks (never
        less than the last reading: the samples and the load meter take differences)."""
        # The driver's summary as the listener stored it: executorList() replaces the driver's
        # totalDuration with the application's uptime (for the UI's GC ratio), which made a
        # local-mode driver look busy all the time (1 core in 1) and its capacity the arrival rate.
        try:
            summary = self._sc.statusStore().executorSummary("driver")
            busy_seconds = int(summary.totalDuration()) / 1000
            failed = int(summary.failedTasks())
        except Exception:  # py4j: not in the store yet (before the first task), or a failed call
            return self._last
        self._last = ExecutorTotals([], self.slots, busy_seconds, failed)
        return self._last

    def started_at(self) -> float:
        """Wall time the SparkContext started."""
        return int(self._sc.startTime()) / 1000

    def set_target(self, executors: int) -> list[str]:
        """Nothing to set (see the class doc); releases nothing."""
        return []
