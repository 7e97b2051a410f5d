"""Kafka offsets outside Spark: the stream's consumer group, lag, and the data-loss guard.

Spark keeps Kafka offsets only in its checkpoint. After each batch's Delta commit the runtime
commits the batch's end offsets to a consumer group named after the stream, so consumer-group tools,
KEDA and the operator see lag; the Delta log and the checkpoint stay the source of truth.
"""

from __future__ import annotations

from dataclasses import dataclass

from deltaflow_api.failures import FailureReason
from deltaflow_runtime.checkpoint import TopicOffsets
from deltaflow_runtime.errors import DeltaflowError, ExitCode
from deltaflow_runtime.kafka_admin import KafkaAdmin

__all__ = ["DataLossError", "Gap", "KafkaAdmin", "data_loss_gaps", "describe_gaps"]


class DataLossError(DeltaflowError):
    """Kafka retention deleted records the stream had not read yet."""

    reason = FailureReason.DATA_LOSS
    exit_code = ExitCode.DATA_LOSS

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
