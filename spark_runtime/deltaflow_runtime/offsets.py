"""Kafka offsets outside Spark: the stream's consumer group, lag, and the data-loss guard.

Spark keeps Kafka offsets only in its checkpoint. After each batch's Delta commit the runtime
commits the batch's end offsets to a consumer group named after the stream, so consumer-group tools,
KEDA and the operator see lag; the Delta log and the checkpoint stay the source of truth.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from deltaflow_runtime.checkpoint import TopicOffsets


class DataLossError(Exception):
    """Kafka retention deleted records the stream had not read yet."""

    def __init__(self, gaps: list[Gap], message: str) -> None:
        super().__init__(message)
        self.gaps = gaps


@dataclass(frozen=True)
class Gap:
    """Records of one partition deleted before the stream read them."""

    topic: str
    partition: int
    next_offset: int  # where the stream resumes
    earliest_offset: int  # the earliest offset Kafka still holds

    @property
    def missing(self) -> int:
        """How many records are gone."""
        return self.earliest_offset - self.next_offset


def data_loss_gaps(next_offsets: TopicOffsets, earliest: TopicOffsets) -> list[Gap]:
    """Partitions where the stream would resume below the earliest retained offset."""
    gaps = []
    for topic, parts in sorted(next_offsets.items()):
        for partition, offset in sorted(parts.items()):
            first = earliest.get(topic, {}).get(partition)
            if first is not None and offset < first:
                gaps.append(Gap(topic, partition, offset, first))
    return gaps


def describe_gaps(gaps: list[Gap], fail_on_data_loss: bool) -> str:
    """A message naming each partition and its gap, and what to do."""
    parts = "; ".join(
        f"{g.topic} partition {g.partition}: the stream resumes at offset {g.next_offset} but "
        f"the earliest retained offset is {g.earliest_offset} ({g.missing} records lost)"
        for g in gaps
    )
    total = sum(g.missing for g in gaps)
    if fail_on_data_loss:
        return (
            f"Kafka retention deleted {total} records this stream had not read yet: {parts}. "
            "The stream stops instead of skipping them (spec.source.failOnDataLoss: true); nothing "
            "was written. Re-produce the records if you can; to accept the loss and continue from "
            "the earliest retained offsets, set spec.source.failOnDataLoss: false."
        )
    return (
        f"Kafka retention deleted {total} unread records ({parts}); continuing from the earliest "
        "retained offsets because spec.source.failOnDataLoss is false."
    )


def subtract(minuend: TopicOffsets, subtrahend: TopicOffsets) -> TopicOffsets:
    """Per partition ``minuend - subtrahend`` where both are known (lag: latest - committed;
    retention headroom: committed - earliest)."""
    out: TopicOffsets = {}
    for topic, parts in minuend.items():
        for partition, offset in parts.items():
            other = subtrahend.get(topic, {}).get(partition)
            if other is not None:
                out.setdefault(topic, {})[partition] = offset - other
    return out


class KafkaAdmin:
    """The few admin calls the runtime needs, over confluent-kafka's AdminClient."""

    def __init__(self, config: Mapping[str, str], timeout: float = 15.0) -> None:
        from confluent_kafka.admin import AdminClient

        self._admin: Any = AdminClient({**config, "log_level": 3})
        self.timeout = timeout

    def partitions(self, topics: list[str]) -> list[tuple[str, int]]:
        """Every (topic, partition) of the given topics."""
        meta = self._admin.list_topics(timeout=self.timeout)
        out: list[tuple[str, int]] = []
        for topic in topics:
            info = meta.topics.get(topic)
            if info is not None and info.error is None:
                out.extend((topic, p) for p in sorted(info.partitions))
        return out

    def topics_matching(self, pattern: str) -> list[str]:
        """Topic names that fully match a Java-style regex (as Spark's subscribePattern)."""
        import re

        meta = self._admin.list_topics(timeout=self.timeout)
        regex = re.compile(pattern)
        return sorted(t for t in meta.topics if regex.fullmatch(t) and not t.startswith("__"))

    def _list_offsets(self, tps: list[tuple[str, int]], latest: bool) -> TopicOffsets:
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import _listoffsets

        if not tps:
            return {}
        offset_spec: Any = _listoffsets.OffsetSpec
        spec = offset_spec.latest() if latest else offset_spec.earliest()
        request = {TopicPartition(t, p): spec for t, p in tps}
        futures = self._admin.list_offsets(request, request_timeout=self.timeout)
        out: TopicOffsets = {}
        for tp, future in futures.items():
            out.setdefault(tp.topic, {})[tp.partition] = int(future.result().offset)
        return out

    def earliest_offsets(self, tps: list[tuple[str, int]]) -> TopicOffsets:
        """The earliest offset Kafka still holds, per partition (after retention)."""
        return self._list_offsets(tps, latest=False)

    def latest_offsets(self, tps: list[tuple[str, int]]) -> TopicOffsets:
        """The log-end offset per partition."""
        return self._list_offsets(tps, latest=True)

    def commit_group_offsets(self, group: str, offsets: TopicOffsets) -> None:
        """Set the consumer group's committed offsets (the group has no members: the stream
        reads with Spark's own assignments, never by joining it)."""
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        tps = [TopicPartition(t, p, o) for t, ps in offsets.items() for p, o in sorted(ps.items())]
        if not tps:
            return
        futures = self._admin.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, tps)], request_timeout=self.timeout
        )
        result = futures[group].result()
        failed = [tp for tp in result.topic_partitions if tp.error is not None]
        if failed:
            raise RuntimeError(f"committing offsets to {group} failed: {failed}")

    def group_offsets(self, group: str) -> TopicOffsets:
        """The consumer group's committed offsets (as any consumer-group tool reads them)."""
        from confluent_kafka import ConsumerGroupTopicPartitions

        futures = self._admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)], request_timeout=self.timeout
        )
        out: TopicOffsets = {}
        for tp in futures[group].result().topic_partitions:
            if tp.offset >= 0:
                out.setdefault(tp.topic, {})[tp.partition] = int(tp.offset)
        return out
