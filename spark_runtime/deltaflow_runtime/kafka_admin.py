"""Kafka's admin API, as the driver uses it: partitions, log-end and earliest offsets, and the
stream's consumer group (committed after each Delta commit, for consumer-group tools and KEDA).
Over confluent-kafka's AdminClient; no Spark, no Kubernetes. The operator has no Kafka client:
it reads lag from the driver's report.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from deltaflow_runtime.checkpoint import TopicOffsets
from deltaflow_runtime.topics import matching_topics


@dataclass(frozen=True)
class KafkaIdentity:
    """Which Kafka a stream read: the cluster's id and each topic's id. Offsets mean something
    only in the log they were read from: another cluster, or a topic deleted and created again
    under the same name (a new id), has other records at the same offsets."""

    cluster_id: str | None
    topic_ids: Mapping[str, str] = field(default_factory=dict)

    KEY = "kafka"  # in a commit's userMetadata entry

    def render(self) -> dict[str, Any]:
        """The entry recorded with each table commit."""
        return {"clusterId": self.cluster_id, "topicIds": dict(sorted(self.topic_ids.items()))}

    @classmethod
    def recorded(cls, entry: Mapping[str, Any]) -> KafkaIdentity | None:
        """The identity a commit entry recorded (None: an older runtime recorded none)."""
        body = entry.get(cls.KEY)
        if not isinstance(body, dict):
            return None
        ids = body.get("topicIds")
        cluster = body.get("clusterId")
        return cls(
            cluster_id=str(cluster) if cluster else None,
            topic_ids={str(t): str(i) for t, i in ids.items()} if isinstance(ids, dict) else {},
        )

    def covers(self, topics: list[str]) -> bool:
        """Whether every topic's id is known."""
        return all(t in self.topic_ids for t in topics)

    def only(self, topics: list[str]) -> KafkaIdentity:
        """The identity of just these topics (those whose id is known)."""
        return KafkaIdentity(
            self.cluster_id, {t: self.topic_ids[t] for t in topics if t in self.topic_ids}
        )


class KafkaAdmin:
    """The few admin calls the runtime needs, over confluent-kafka's AdminClient."""

    def __init__(self, config: Mapping[str, Any], timeout: float = 15.0) -> None:
        from confluent_kafka.admin import AdminClient

        self._config = {**config, "log_level": 3}
        self._admin: Any = AdminClient(self._config)
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

    def identity(self, topics: list[str]) -> KafkaIdentity:
        """The cluster's id and the ids of those ``topics`` that exist."""
        from confluent_kafka import KafkaException, TopicCollection

        cluster = self._admin.describe_cluster(request_timeout=self.timeout).result()
        ids: dict[str, str] = {}
        if topics:
            futures = self._admin.describe_topics(
                TopicCollection(sorted(topics)), request_timeout=self.timeout
            )
            for name, future in futures.items():
                try:
                    ids[name] = str(future.result().topic_id)
                except KafkaException:
                    continue  # gone: Spark's own handling of a deleted topic applies
        return KafkaIdentity(cluster.cluster_id or None, ids)

    def topics_matching(self, pattern: str) -> list[str]:
        """The topics Spark's subscribePattern reads (found in the name, not only matching it
        whole: see :mod:`deltaflow_runtime.topics`)."""
        meta = self._admin.list_topics(timeout=self.timeout)
        return matching_topics(pattern, meta.topics)

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
        reads with Spark's own assignments, never by joining it). A partition the broker
        refused raises its KafkaException (the first one's: they share a cause)."""
        from confluent_kafka import (
            ConsumerGroupTopicPartitions,
            KafkaError,
            KafkaException,
            TopicPartition,
        )
        from confluent_kafka.admin import AdminClient

        tps = [TopicPartition(t, p, o) for t, ps in offsets.items() for p, o in sorted(ps.items())]
        if not tps:
            return
        request = [ConsumerGroupTopicPartitions(group, tps)]
        try:
            result = self._admin.alter_consumer_group_offsets(
                request, request_timeout=self.timeout
            )[group].result()
        except KafkaException as error:
            if error.args[0].code() != KafkaError._TIMED_OUT:
                raise
            # After its group coordinator restarted, librdkafka's admin client (over SASL_SSL,
            # seen with 2.x) times out on every such request while metadata still answers; a
            # new client reconnects at once. Measured: each batch waited 46 s for its commit.
            self._admin = AdminClient(self._config)
            result = self._admin.alter_consumer_group_offsets(
                request, request_timeout=self.timeout
            )[group].result()
        failed = [tp.error for tp in result.topic_partitions if tp.error is not None]
        if failed:
            raise KafkaException(failed[0])

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
