"""Where a driver JVM's CPU goes over a window: by thread (from /proc, exact) and by what the Java
threads were running (JFR execution samples, attributed to the first matching phase).

Used by ``bench/trickle.py --profile``: a small batch's cost is mostly fixed machinery (Delta's
state reconstruction and checkpoints, Spark's planning and scheduling, the JIT), and the split
between the runtime and the hand-written job shows which of it is the runtime's own.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")

# Thread names (Linux truncates them to 15 characters) -> a group.
THREAD_GROUPS = (
    ("jit", re.compile(r"^C[12] Compiler")),
    ("gc", re.compile(r"^(GC |G1 |VM Thread|VM Periodic)")),
    ("tasks", re.compile(r"^Executor task")),
    ("stream thread", re.compile(r"^stream execut")),
    ("py4j calls", re.compile(r"^Thread-\d")),
    ("scheduler", re.compile(r"^(dag-scheduler|task-result|dispatcher|spark-listener|heartbeat)")),
)

# A sample's phase: the first rule any of its frames matches, in this order (the most specific
# first: a checkpoint runs inside a commit, a state reconstruction inside a checkpoint).
# Delta's state reconstruction and checkpoint jobs run on task threads, whose stacks hold no Delta
# frame: their share shows under the task-side phases (planning's projection code, parquet).
PHASES = (
    ("delta: checkpoint", ("org.apache.spark.sql.delta.Checkpoints",)),
    ("delta: checksum", ("org.apache.spark.sql.delta.RecordChecksum", "ChecksumHook")),
    (
        "delta: state reconstruction (txnVersion, snapshot)",
        ("computedState", "stateReconstruction", "org.apache.spark.sql.delta.SnapshotState"),
    ),
    ("delta: log listing and snapshot update", ("SnapshotManagement", "DeltaLog.update")),
    ("delta: commit", ("OptimisticTransactionImpl",)),
    ("delta: write stats", ("StatisticsCollection", "DeltaJobStatisticsTracker", "StatsCollect")),
    ("parquet write", ("org.apache.parquet", "ParquetOutputWriter", "FileFormatWriter")),
    ("kafka read", ("org.apache.spark.sql.kafka010", "org.apache.kafka")),
    ("json parse", ("JsonToStructs", "com.fasterxml.jackson", "JacksonParser")),
    ("codegen", ("org.codehaus.janino", "codegen.CodeGenerator")),
    ("query planning", ("sql.catalyst", "QueryExecution", "SparkPlanner", "sql.execution.")),
    ("streaming logs", ("HDFSMetadataLog", "OffsetSeqLog", "CommitLog", "CheckpointFileManager")),
    ("py4j", ("py4j.",)),
    ("scheduler and rpc", ("org.apache.spark.scheduler", "org.apache.spark.rpc", "io.netty")),
)


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of each live thread of ``pid``, keyed ``"<tid> <name>"`` (compare by tid:
    a thread may be renamed meanwhile)."""
    out: dict[str, float] = {}
    task_dir = Path(f"/proc/{pid}/task")
    for task in task_dir.iterdir() if task_dir.exists() else ():
        try:
            raw = (task / "stat").read_text(errors="replace")
        except OSError:
            continue
        name = raw[raw.index("(") + 1 : raw.rindex(")")]
        fields = raw.rsplit(")", 1)[1].split()
        out[f"{task.name} {name}"] = (int(fields[11]) + int(fields[12])) / _TICK
    return out


def _group(thread: str) -> str:
    name = thread.split(" ", 1)[1]
    return next((g for g, rule in THREAD_GROUPS if rule.search(name)), "other threads")


def by_thread_group(
    before: dict[str, float], after: dict[str, float], total: float
) -> dict[str, float]:
    """CPU seconds per thread group between two ``thread_cpu`` readings; what the process
    burned in threads that ended meanwhile (``total`` minus the live ones) is its own group."""
    earlier = {thread.split(" ", 1)[0]: seconds for thread, seconds in before.items()}
    groups: dict[str, float] = {}
    for thread, seconds in after.items():
        group = _group(thread)
        spent = seconds - earlier.get(thread.split(" ", 1)[0], 0.0)
        groups[group] = groups.get(group, 0.0) + spent
    groups["threads that ended"] = max(0.0, total - sum(groups.values()))
    return groups


def phase_of(frames: list[str]) -> str:
    """The phase of one sample's stack (frames as ``class.method``, any order)."""
    for phase, markers in PHASES:
        if any(marker in frame for frame in frames for marker in markers):
            return phase
    return "other"


@dataclass
class Recording:
    """A JFR recording started on a JVM by pid (``jcmd JFR.start``), stopped into ``path``."""

    pid: int
    path: Path
    name: str = "deltaflow-bench"
    samples: Counter[str] = field(default_factory=Counter)

    def start(self) -> None:
        """Start sampling (the ``profile`` settings: a Java stack every 10 ms per thread)."""
        # Delta's frames sit deep under Spark's: JFR's default 64 frames would cut them off.
        _jcmd(self.pid, "JFR.configure", "stackdepth=1024")
        _jcmd(self.pid, "JFR.start", f"name={self.name}", "settings=profile")

    def stop(self) -> Counter[str]:
        """Stop, write the file and count its execution samples by phase."""
        _jcmd(self.pid, "JFR.stop", f"name={self.name}", f"filename={self.path}")
        printed = subprocess.run(
            [
                "jfr",
                "print",
                "--json",
                "--stack-depth",
                "256",
                "--events",
                "jdk.ExecutionSample",
                str(self.path),
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        for event in json.loads(printed)["recording"]["events"]:
            frames = [
                f"{f['method']['type']['name'].replace('/', '.')}.{f['method']['name']}"
                for f in (event["values"].get("stackTrace") or {}).get("frames", [])
            ]
            self.samples[phase_of(frames)] += 1
        return self.samples


def _jcmd(pid: int, *command: str) -> None:
    subprocess.run(["jcmd", str(pid), *command], check=True, capture_output=True, text=True)


def jvm_pid(pids: list[int]) -> int | None:
    """The Java process among ``pids`` (the driver's JVM, a child of its Python process)."""
    for pid in pids:
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == "java":
                return pid
        except OSError:
            continue
    return None


def report(
    groups: dict[str, float], samples: Counter[str], batches: int, python_seconds: float
) -> str:
    """The breakdown as printable lines: CPU-s per batch by thread group, then the Java
    threads' sampled time by phase as shares and CPU-s per batch (samples scaled to the
    sampled groups' CPU: Java code only, neither the JIT nor the GC)."""
    per = max(batches, 1)
    lines = [f"    python process: {python_seconds / per:.3f} cpu-s per batch"]
    for group, seconds in sorted(groups.items(), key=lambda kv: -kv[1]):
        lines.append(f"    jvm {group:18s}: {seconds / per:.3f} cpu-s per batch")
    sampled_cpu = sum(s for g, s in groups.items() if g not in ("jit", "gc"))
    total = sum(samples.values())
    if total:
        lines.append(f"    java code by phase ({total} samples):")
        for phase, count in samples.most_common():
            share = count / total
            lines.append(
                f"      {phase:52s} {share:6.1%}  ~{share * sampled_cpu / per:.3f} cpu-s per batch"
            )
    return "\n".join(lines)
