"""Streams that authenticate: mutual TLS, SCRAM-SHA-512 over TLS and OAUTHBEARER (OIDC client
credentials against the stack's token issuer), each as its own principal holding only the ACLs
the README lists, against the stack's real broker. Spark's consumers, the driver's lag poll,
the dead-letter path and the consumer-group commit all go over the secured listener; the
secrets are files laid out as the kubelet mounts a Secret (``..data`` symlinks)."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions
from kafka_logins import LOGINS, Login, login_oauth, secret_files
from runtime_kit import (
    create_topic,
    duplicates,
    manifest,
    order,
    pipeline,
    produce,
    read_table,
    tpos,
    unique,
    wait_for,
)

from deltaflow_api.driver_pod import KAFKA_SECRET_FILES
from deltaflow_runtime.kafka_auth import file_env
from deltaflow_runtime.stream import StreamOptions, StreamRunner
from devstack.kafka import KafkaBroker

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

BAD = [b"not json", b'{"id": "abc"}', b"[1]"]


def mount_like_kubelet(root: Path, login: Login, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Secrets as the kubelet mounts them, named to the runtime as a local run names them."""
    paths = secret_files(root, login, like_kubelet=True)
    for secret_file in KAFKA_SECRET_FILES:
        if secret_file.field in paths:
            monkeypatch.setenv(file_env(secret_file), paths[secret_file.field])


@pytest.mark.parametrize("mechanism", list(LOGINS))
def test_a_stream_authenticates_and_lands_every_record_once(
    kafka: KafkaBroker,
    runtime_spark: SparkSession,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mechanism: str,
) -> None:
    login = LOGINS[mechanism](kafka)
    topic = unique(f"auth-{mechanism}")
    create_topic(kafka.bootstrap_servers, topic, partitions=2)
    records = [(str(i).encode(), order(i)) for i in range(300)]
    for n, value in enumerate(BAD):
        records.insert(50 * (n + 1), (b"bad", value))
    sent = produce(kafka.bootstrap_servers, topic, records)  # as the super user
    document = manifest(unique(mechanism), topic, login.bootstrap, tmp_path)
    document["spec"]["source"]["auth"] = login.auth
    group = pipeline(document).identity.consumer_group
    # What the README says a stream's principal needs: Read and Describe on its topic, Read on
    # its consumer group (committed after each Delta commit, for lag tools). The mTLS principal
    # is not given the group: the stream lands its records all the same, and says why its
    # offsets are not in the group (its report carries that to Degraded).
    with_group = mechanism != "mtls"
    kafka.grant(login.principal, topic=topic, group=group if with_group else None)
    mount_like_kubelet(tmp_path / "secrets", login, monkeypatch)

    runner = StreamRunner(runtime_spark, pipeline(document), StreamOptions(available_now=True))
    runner.start()
    runner.wait(timeout=300)

    ident = runner.pipeline.identity
    table, dead = tpos(read_table(ident.table_path)), tpos(read_table(ident.dead_letter_table_path))
    bad = {s.tpo for s in sent if s.value in BAD}
    assert duplicates(table) == []
    assert duplicates(dead) == []
    assert set(table) == {s.tpo for s in sent} - bad
    assert set(dead) == bad
    # The driver's own client: its lag poll over the same listener, as the same principal.
    assert runner.poll_kafka_once() == 0
    assert runner.lag is not None
    assert runner.lag["partitions"] == 2
    committed = kafka.admin().list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    offsets = {
        tp.partition: tp.offset
        for tp in committed[group].result().topic_partitions
        if tp.offset >= 0  # -1001: none committed
    }
    assert runner.writer is not None
    problem = runner.writer.group_commit_problem
    if with_group:
        assert offsets == {p: 1 + max(o for _, q, o in table + dead if q == p) for p in (0, 1)}
        assert problem == ""
    else:
        assert offsets == {}
        assert f"may not use Group:{group}" in problem, problem
        assert "grant it Read on the group" in problem, problem
        assert "authorization failed" in problem.lower(), problem  # the client's words
    shutil.rmtree(tmp_path / "secrets")


TOKEN_SECONDS = 12  # the issuer's token lifetime for this client: several pass in the test


def test_oauthbearer_tokens_are_refreshed_before_they_expire(
    kafka: KafkaBroker,
    runtime_spark: SparkSession,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The broker ends a session when its token expires (or at the listener's 60 s reauth): a
    # client that did not refresh its token could not fetch or commit after the first expiry.
    login = login_oauth(kafka, token_lifetime=TOKEN_SECONDS)
    topic = unique("auth-refresh")
    create_topic(kafka.bootstrap_servers, topic, partitions=1)
    document = manifest(unique("refresh"), topic, login.bootstrap, tmp_path)
    document["spec"]["source"]["auth"] = login.auth
    # Kafka's Java login refreshes at 80% of a token's life, but by default never sooner than
    # 60 s after the last and keeping 300 s of buffer: tuned down for 12 s tokens.
    document["spec"]["source"]["options"] = {
        "kafka.sasl.login.refresh.min.period.seconds": "2",
        "kafka.sasl.login.refresh.buffer.seconds": "2",
    }
    group = pipeline(document).identity.consumer_group
    kafka.grant(login.principal, topic=topic, group=group)
    mount_like_kubelet(tmp_path / "secrets", login, monkeypatch)

    runner = StreamRunner(runtime_spark, pipeline(document), StreamOptions(poll_seconds=2.0))
    runner.start()
    waiting = threading.Thread(target=runner.wait, daemon=True)
    waiting.start()
    sent = []
    try:
        started = time.monotonic()
        i = 0
        while time.monotonic() - started < 3.5 * TOKEN_SECONDS:  # past three lifetimes
            sent += produce(kafka.bootstrap_servers, topic, [(b"k", order(i))])
            i += 1
            time.sleep(1.0)
        expected = {s.tpo for s in sent}
        path = runner.pipeline.identity.table_path
        wait_for(lambda: set(tpos(read_table(path))) >= expected, 60, "the last records")
        # The driver's librdkafka client refreshed its own token too: its poll still reads.
        assert runner.poll_kafka_once() == 0
    finally:
        runner.options.stop.set()
        waiting.join(120)
    table = tpos(read_table(runner.pipeline.identity.table_path))
    assert duplicates(table) == []
    assert set(table) == expected
