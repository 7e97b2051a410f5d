"""Pooled streams on a secured Kafka: a ``deltaflow pool`` process whose pod carries one set of
Kafka credentials (the Secret files at a driver's paths) runs the members entitled to them
exactly once, refuses a member naming other credentials (it would read these), and refuses a
Kafka option the client refuses by its key, once, while the others run on."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kafka_logins import LOGINS, secret_files
from pool_kit import Pool, landed, start_pool
from runtime_kit import pipeline, wait_for

from deltaflow_api.driver_pod import KAFKA_SECRET_FILES
from deltaflow_runtime.kafka_auth import file_env
from devstack.kafka import KafkaBroker

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


@pytest.mark.parametrize("mechanism", ["mtls", "scram-sha-512-over-tls"])
def test_pooled_streams_read_with_the_credentials_their_pool_carries(
    kafka: KafkaBroker, tmp_path: Path, mechanism: str
) -> None:
    login = LOGINS[mechanism](kafka)
    pool = Pool(kafka.bootstrap_servers, tmp_path / "members", tmp_path / "pool.log")
    pool.folder.mkdir()
    for name in ("a", "b", "other-secret", "bad-option"):
        pool.add(name, tmp_path, auth=login.auth, listener=login.bootstrap)
        source = pool.docs[name]["spec"]["source"]
        kafka.grant(
            login.principal,
            topic=source["topic"],
            group=pipeline(pool.docs[name]).identity.consumer_group,
        )
    # The same fields from another Secret: the pod does not carry it, and the files it does
    # carry are another member's. Refused, never started with them.
    pool.docs["other-secret"]["spec"]["source"]["auth"]["caCertificate"] = {
        "name": "billing-kafka",
        "key": "ca.crt",
    }
    pool.write("other-secret")
    # Kafka's consumer refuses a non-numeric size: a fix of the spec, not a restart.
    pool.docs["bad-option"]["spec"]["source"]["options"] = {"kafka.fetch.max.bytes": "lots"}
    pool.write("bad-option")
    pool.produce(pool.docs, 0, 300)

    # The Secrets as the kubelet mounts them into the pool's pod, named as a pod names them.
    paths = secret_files(tmp_path / "secrets", login, like_kubelet=True)
    env = {file_env(f): paths[f.field] for f in KAFKA_SECRET_FILES if f.field in paths}
    report = tmp_path / "report.json"
    process = start_pool(pool, tmp_path / "work", report=report, env=env)
    try:
        pool.wait_landed(["a", "b"], 240)
        refused = wait_for(
            lambda: pool.report(report, "other-secret") or None, 90, "the refusal reported"
        )
        assert refused["phase"] == "Invalid", refused
        assert "spec.source.auth: differs from the pool's members'" in refused["message"]
        assert not pool.events("member_started", pool.key("other-secret"))
        bad = wait_for(
            lambda: (m := pool.report(report, "bad-option")).get("phase") == "NeedsAction" and m,
            90,
            "the bad option reported",
        )
        assert "spec.source.options.kafka.fetch.max.bytes" in bad["message"], bad
        assert "'lots'" in bad["message"], bad
        assert "ConfigException" not in bad["message"], bad  # Kafka's words, not a trace
        # More records: a and b land them; the refused option waits for a new manifest.
        pool.produce(["a", "b"], 300, 100)
        pool.wait_landed(["a", "b"], 120)
        time.sleep(5)  # beyond the 3 s first backoff: it would have restarted by now
        assert len(pool.events("member_failed", pool.key("bad-option"))) == 1
        assert process.terminate(timeout=120) == 0, pool.log.read_text()[-3000:]
    finally:
        if process.alive():
            process.kill()
    for name in ("a", "b"):
        assert {s.tpo for s in pool.sent[name]} == landed(pool.docs[name])
    assert not pool.events("member_failed", pool.key("a"))
    assert not pool.events("member_failed", pool.key("b"))
