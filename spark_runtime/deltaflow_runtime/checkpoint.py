"""The stream's checkpoint, read (and, for recovery, written) through Hadoop's FileSystem API.

Spark writes ``offsets/<batch>`` (the planned Kafka end offsets) before it runs a batch and
``commits/<batch>`` after the batch's sink returned. The runtime reads them to know a batch's end
offsets (for the consumer group and the table's commit metadata) and where a restart resumes.
Paths go through Hadoop so the same code reads ``file://`` and ``s3a://`` checkpoints.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from deltaflow_runtime.errors import DeltaflowError
from deltaflow_runtime.jvm import hadoop_conf, hadoop_path, jvm

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# {topic: {partition: offset}}
TopicOffsets = dict[str, dict[int, int]]

OFFSET_LOG_VERSION = "v1"


class CheckpointFormatError(DeltaflowError):
    """A checkpoint file is not in the format this runtime reads."""


def parse_offset_log(text: str) -> list[str | None]:
    """The per-source offset JSON strings of one ``offsets/<batch>`` file (None: no offset)."""
    lines = text.splitlines()
    if len(lines) < 2 or not lines[0].startswith("v"):
        raise CheckpointFormatError(f"not a Spark offset log entry: {text[:80]!r}")
    return [None if line == "-" else line for line in lines[2:]]


def batch_timestamp_ms(text: str) -> int | None:
    """When Spark planned the batch of one ``offsets/<batch>`` file (its ``batchTimestampMs``)."""
    lines = text.splitlines()
    if len(lines) < 2:
        return None
    try:
        value = json.loads(lines[1]).get("batchTimestampMs")
    except (ValueError, AttributeError):
        return None
    return int(value) if value is not None else None


def kafka_offsets(offset_json: str) -> TopicOffsets:
    """Spark's Kafka source offset JSON (``{"topic": {"0": 12}}``) as ints."""
    raw = json.loads(offset_json)
    return {topic: {int(p): int(o) for p, o in parts.items()} for topic, parts in raw.items()}


def render_offsets(offsets: TopicOffsets) -> str:
    """The inverse of :func:`kafka_offsets` (Spark's JSON form, partitions as strings)."""
    return json.dumps(
        {t: {str(p): o for p, o in sorted(ps.items())} for t, ps in sorted(offsets.items())},
        separators=(",", ":"),
    )


def offset_log_entry(
    offsets: TopicOffsets, timestamp_ms: int, conf: dict[str, str] | None = None
) -> str:
    """An ``offsets/<batch>`` file for one Kafka source, as Spark writes it. ``conf``: the
    session settings Spark records with a batch; on restart it reads the shuffle partitions of an
    unfinished batch and of the one before it (and fails on an entry without them)."""
    meta = {"batchWatermarkMs": 0, "batchTimestampMs": timestamp_ms, "conf": dict(conf or {})}
    return f"{OFFSET_LOG_VERSION}\n{json.dumps(meta)}\n{render_offsets(offsets)}"


@dataclass(frozen=True)
class CheckpointState:
    """What a checkpoint says about the stream's progress."""

    exists: bool
    latest_planned: int | None  # highest offsets/<batch>
    latest_committed: int | None  # highest commits/<batch>

    @property
    def empty(self) -> bool:
        """No batch was ever planned here (a new or lost checkpoint)."""
        return self.latest_planned is None


class HadoopDir:
    """A directory read and written through Hadoop's FileSystem (file://, s3a://, ...)."""

    def __init__(self, spark: SparkSession, path: str) -> None:
        self.path = path.rstrip("/")
        self._spark = spark
        self._java = jvm(spark)
        self._fs = hadoop_path(self.path, spark).getFileSystem(hadoop_conf(spark))

    def _hpath(self, relative: str) -> Any:
        return self._java.org.apache.hadoop.fs.Path(
            f"{self.path}/{relative}" if relative else self.path
        )

    def exists(self, relative: str = "") -> bool:
        """Whether the directory (or a path under it) exists."""
        return bool(self._fs.exists(self._hpath(relative)))

    def names(self, relative: str) -> list[str]:
        """Names of the entries of a subdirectory (empty if it does not exist)."""
        directory = self._hpath(relative)
        if not self._fs.exists(directory):
            return []
        return [str(s.getPath().getName()) for s in self._fs.listStatus(directory)]

    def read(self, relative: str) -> str | None:
        """A file's text, or None if it does not exist."""
        path = self._hpath(relative)
        if not self._fs.exists(path):
            return None
        stream = self._fs.open(path)
        try:
            return str(self._java.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()

    def delete(self) -> None:
        """Delete the directory and everything under it."""
        self._fs.delete(self._hpath(""), True)

    def rename_to(self, path: str) -> None:
        """Move the directory to ``path`` (which must not exist)."""
        target = self._java.org.apache.hadoop.fs.Path(path.rstrip("/"))
        if not self._fs.rename(self._hpath(""), target):
            raise OSError(f"could not rename {self.path} to {path}")

    def first_line(self, relative: str) -> str | None:
        """A file's first line (without reading the rest), or None if it does not exist."""
        path = self._hpath(relative)
        if not self._fs.exists(path):
            return None
        stream = self._fs.open(path)
        try:
            io = self._java.java.io
            line = io.BufferedReader(io.InputStreamReader(stream, "UTF-8")).readLine()
            return "" if line is None else str(line)
        finally:
            stream.close()

    def write(self, relative: str, text: str) -> None:
        """Create a file (refuses to overwrite)."""
        stream = self._fs.create(self._hpath(relative), False)
        try:
            stream.write(bytearray(text.encode("utf-8")))
        finally:
            stream.close()


class Checkpoint(HadoopDir):
    """One stream's checkpoint directory."""

    def _batches(self, log: str) -> list[int]:
        return sorted(int(n) for n in self.names(log) if n.isdigit())

    def state(self) -> CheckpointState:
        """Latest planned and committed batch ids."""
        if not self.exists():
            return CheckpointState(False, None, None)
        planned, committed = self._batches("offsets"), self._batches("commits")
        return CheckpointState(
            True, planned[-1] if planned else None, committed[-1] if committed else None
        )

    def end_offsets(self, batch_id: int) -> TopicOffsets | None:
        """The Kafka end offsets planned for ``batch_id`` (exclusive), or None if not logged."""
        text = self.read(f"offsets/{batch_id}")
        if text is None:
            return None
        sources = parse_offset_log(text)
        if len(sources) != 1 or sources[0] is None:
            raise CheckpointFormatError(f"offsets/{batch_id}: expected one Kafka source")
        return kafka_offsets(sources[0])

    def in_flight_since_ms(self) -> int | None:
        """When the batch Spark planned but has not committed was planned (None: no such batch,
        or no checkpoint). Its data files are no older than that."""
        if not self.exists():
            return None
        state = self.state()
        planned, committed = state.latest_planned, state.latest_committed
        if planned is None or (committed is not None and committed >= planned):
            return None
        text = self.read(f"offsets/{planned}")
        return None if text is None else batch_timestamp_ms(text)

    def initial_offsets(self) -> TopicOffsets | None:
        """The offsets the stream started from (``sources/0/0``), if it was ever started."""
        text = self.read("sources/0/0")
        if text is None:
            return None
        lines = text.lstrip("\x00").splitlines()
        if len(lines) < 2:
            raise CheckpointFormatError("sources/0/0: not a Kafka initial offset entry")
        return kafka_offsets(lines[1])

    def resume_offsets(self) -> TopicOffsets | None:
        """Where a restart continues reading: the end of the last committed batch, else the
        initial offsets; None for a checkpoint that never started."""
        state = self.state()
        if state.latest_committed is not None:
            return self.end_offsets(state.latest_committed)
        return self.initial_offsets()

    def rebuild_at(
        self, batch_id: int, offsets: TopicOffsets, previous: TopicOffsets | None = None
    ) -> bool:
        """Write a fresh checkpoint at the table's last batch ``batch_id`` (its end ``offsets``).

        With ``previous`` (the end offsets of batch ``batch_id - 1``), batch ``batch_id`` is left
        planned but not committed, so the stream replays it first: the table skips it as already
        written, and its dead letters are written if a crash between the two commits lost them.
        Without, the stream resumes at ``batch_id + 1``. Returns whether the batch is replayed.

        The checkpoint is written in a sibling directory and renamed into place, so a crash
        mid-way leaves no half-built checkpoint behind.
        """
        if self.exists() and not self.state().empty:
            raise FileExistsError(f"{self.path} already holds a checkpoint; move it away first")
        metadata = self.read("metadata") or json.dumps({"id": str(uuid.uuid4())})
        staging = HadoopDir(self._spark, f"{self.path}.rebuilding-{uuid.uuid4().hex[:8]}")
        staging.write("metadata", metadata)
        now = int(time.time() * 1000)
        shuffle = "spark.sql.shuffle.partitions"
        conf = {shuffle: str(self._spark.conf.get(shuffle))}
        committed = f"{OFFSET_LOG_VERSION}\n" + '{"nextBatchWatermarkMs":0}'
        replay = previous is not None and batch_id > 0
        if replay:
            assert previous is not None
            staging.write(f"offsets/{batch_id - 1}", offset_log_entry(previous, now, conf))
            staging.write(f"commits/{batch_id - 1}", committed)
            staging.write(f"offsets/{batch_id}", offset_log_entry(offsets, now, conf))
        else:
            # Spark restarts from the latest offset entry and also reads the one before it (the
            # start of that batch); an empty batch ending where batch_id ends serves as both.
            for batch in (batch_id - 1, batch_id) if batch_id > 0 else (batch_id,):
                staging.write(f"offsets/{batch}", offset_log_entry(offsets, now, conf))
                staging.write(f"commits/{batch}", committed)
        if self.exists():
            self.delete()  # holds no batch (checked above): at most metadata and sources
        staging.rename_to(self.path)
        return replay
