"""The stream pool's pure rules: which streams a pool may run, how long a failed member waits,
the per-batch cap of a member's backlog, and the members a folder of manifests holds."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from deltaflow_api import DeltaIngestion
from deltaflow_runtime.pool import (
    BACKOFF_MAX_SECONDS,
    DEFAULT_MAX_OFFSETS_PER_TRIGGER,
    MAX_REPORT_BYTES,
    REPORT_MESSAGE_CHARS,
    STABLE_RUN_SECONDS,
    Parsed,
    ReportPacer,
    Shared,
    backoff_seconds,
    capped,
    failures_in_a_row,
    fit_report,
    pool_conflicts,
    read_members,
)
from support.manifests import set_field, valid_manifest


def _ingestion(edit: dict[str, Any] | None = None, namespace: str = "data") -> DeltaIngestion:
    document = valid_manifest(namespace=namespace)
    for path, value in (edit or {}).items():
        set_field(document, path, value)
    return DeltaIngestion.model_validate(document)


BASE = _ingestion()

# (case, the member's edits and namespace, the fields its conflicts name; empty: it may join)
CONFLICTS = [
    ("the pool's own kind of stream", {}, "data", []),
    (
        "session settings are its own",
        {
            "spec.sparkConf": {
                "spark.sql.shuffle.partitions": "2",
                "spark.databricks.delta.properties.defaults.checkpointInterval": "5",
            }
        },
        "data",
        [],
    ),
    ("another namespace", {}, "other", ["metadata.namespace"]),
    (
        "another object store",
        {"spec.sink.storage": {"endpoint": "http://minio:9000"}},
        "data",
        ["spec.sink.storage"],
    ),
    (
        "Kafka credentials its pool does not carry",
        {
            "spec.source.auth": {
                "securityProtocol": "SASL_SSL",
                "saslMechanism": "SCRAM-SHA-512",
                "username": {"name": "k", "key": "u"},
                "password": {"name": "k", "key": "p"},
            }
        },
        "data",
        ["spec.source.auth"],
    ),
    (
        "a JVM setting",
        {"spec.sparkConf": {"spark.executor.memory": "4g"}},
        "data",
        ["spec.sparkConf.spark.executor.memory"],
    ),
    (
        "a session setting Spark fixes at the JVM's start",
        {"spec.sparkConf": {"spark.sql.warehouse.dir": "/elsewhere"}},
        "data",
        ["spec.sparkConf.spark.sql.warehouse.dir"],
    ),
    (
        "a SparkContext setting beside a session one",
        {"spec.sparkConf": {"spark.sql.shuffle.partitions": "2", "spark.scheduler.mode": "FIFO"}},
        "data",
        ["spec.sparkConf.spark.scheduler.mode"],
    ),
]


@pytest.mark.parametrize(
    ("edits", "namespace", "fields"), [c[1:] for c in CONFLICTS], ids=[c[0] for c in CONFLICTS]
)
def test_which_streams_a_pool_may_run(
    edits: dict[str, Any], namespace: str, fields: list[str]
) -> None:
    member = _ingestion(edits, namespace)
    conflicts = pool_conflicts(member, "data", Shared.of(BASE))
    assert [c.split(":")[0] for c in conflicts] == fields, conflicts
    # Each says what to do about it.
    assert all(("run the stream on a driver" in c or "never mixes" in c) for c in conflicts)


SCRAM = {
    "securityProtocol": "SASL_SSL",
    "saslMechanism": "SCRAM-SHA-512",
    "username": {"name": "orders-kafka", "key": "username"},
    "password": {"name": "orders-kafka", "key": "password"},
}
LAKE = [{"name": "lake", "claimName": "lake", "mountPath": "/lake"}]
# A pool whose pod carries SCRAM credentials and a volume: (case, the member's edits, the
# fields its conflicts name).
CARRIED = [
    ("the same credentials and volume", {}, []),
    (
        "another Secret for its password",
        {"spec.source.auth.password": {"name": "billing-kafka", "key": "password"}},
        ["spec.source.auth"],
    ),
    ("no credentials (the pod holds some)", {"spec.source.auth": None}, ["spec.source.auth"]),
    (
        "another mechanism with the same Secret",
        {"spec.source.auth.saslMechanism": "SCRAM-SHA-256"},
        ["spec.source.auth"],
    ),
    ("no volume", {"spec.volumes": []}, ["spec.volumes"]),
    (
        "another claim at the same path",
        {"spec.volumes": [{**LAKE[0], "claimName": "other"}]},
        ["spec.volumes"],
    ),
]


@pytest.mark.parametrize(("edits", "fields"), [c[1:] for c in CARRIED], ids=[c[0] for c in CARRIED])
def test_a_member_runs_only_with_the_credentials_and_volumes_its_pool_carries(
    edits: dict[str, Any], fields: list[str]
) -> None:
    carried = {"spec.source.auth": SCRAM, "spec.volumes": LAKE}
    pool = Shared.of(_ingestion(carried))
    document = valid_manifest(namespace="data")
    for path, value in {**carried, **edits}.items():
        set_field(document, path, copy.deepcopy(value))
    member = DeltaIngestion.model_validate(document)
    conflicts = pool_conflicts(member, "data", pool)
    assert [c.split(":")[0] for c in conflicts] == fields, conflicts
    # A member that differs is never run with what the pod carries: it is refused, and told so.
    assert all("run the stream on a driver of its own" in c for c in conflicts)


BACKOFF = [  # (failures in a row, seconds until the next start)
    (0, 0.0),
    (1, 10.0),
    (2, 20.0),
    (3, 40.0),
    (5, 160.0),
    (6, BACKOFF_MAX_SECONDS),
    (60, BACKOFF_MAX_SECONDS),  # no overflow however long it fails
]


@pytest.mark.parametrize(("failures", "seconds"), BACKOFF)
def test_a_failed_member_backs_off_longer_each_time_up_to_five_minutes(
    failures: int, seconds: float
) -> None:
    assert backoff_seconds(failures) == seconds


ROWS = [  # (failures so far, its last start, now, failures in a row)
    (3, 1000.0, 1000.0 + STABLE_RUN_SECONDS - 1, 3),  # failed again soon after its start
    (3, 1000.0, 1000.0 + STABLE_RUN_SECONDS, 0),  # it ran long enough: the row is over
    (0, None, 5.0, 0),
    (2, None, 5.0, 2),  # never started (failed at its checks)
]


@pytest.mark.parametrize(("failures", "started_at", "now", "in_a_row"), ROWS)
def test_a_run_of_ten_minutes_ends_a_row_of_failures(
    failures: int, started_at: float | None, now: float, in_a_row: int
) -> None:
    """A member that committed once and failed again keeps its backoff growing; one that ran
    for ten minutes starts a new row (kubelet's rule for CrashLoopBackOff)."""
    assert failures_in_a_row(failures, started_at, now) == in_a_row


def test_a_members_backlog_is_read_in_capped_batches_unless_its_spec_says() -> None:
    unset = _ingestion({"spec.source.maxOffsetsPerTrigger": None})
    assert capped(unset).spec.source.max_offsets_per_trigger == DEFAULT_MAX_OFFSETS_PER_TRIGGER
    assert unset.spec.source.max_offsets_per_trigger is None  # the original is left as it was
    own = _ingestion({"spec.source.maxOffsetsPerTrigger": 1_000_000})
    assert capped(own).spec.source.max_offsets_per_trigger == 1_000_000


def test_a_folder_of_manifests_is_the_pools_members(tmp_path: Path) -> None:
    """Members by namespace/name; a file that is no valid DeltaIngestion, or one the pool
    cannot run, is reported by its problem and never becomes a pipeline; hidden files (a
    mounted ConfigMap's ..data links) and other extensions are not members."""
    good = valid_manifest("good")
    (tmp_path / "good.yaml").write_text(yaml.safe_dump(good))
    broken = copy.deepcopy(good)
    broken["metadata"]["name"] = "broken"
    broken["spec"]["trigger"] = {"interval": "soon"}
    (tmp_path / "broken.yaml").write_text(yaml.safe_dump(broken))
    foreign = valid_manifest("foreign", namespace="other")
    (tmp_path / "foreign.yaml").write_text(yaml.safe_dump(foreign))
    (tmp_path / "..data.yaml").write_text(yaml.safe_dump(valid_manifest("hidden")))
    (tmp_path / "notes.txt").write_text("not a member")
    (tmp_path / "zz-again.yaml").write_text(yaml.safe_dump(good))  # the same member twice

    members = read_members(tmp_path, "data", Shared.of(BASE))
    # another namespace's stream is reported by its file, never as a member of this pool
    assert sorted(members) == ["broken.yaml", "data/good", "foreign.yaml", "zz-again.yaml"]
    again_problem = members["zz-again.yaml"].problem
    assert again_problem is not None
    assert "good.yaml already runs data/good" in again_problem[1]
    assert members["data/good"].pipeline is not None
    assert members["data/good"].problem is None
    broken_problem = members["broken.yaml"].problem
    assert broken_problem is not None
    assert "spec.trigger.interval" in broken_problem[1], broken_problem
    foreign_member = members["foreign.yaml"]
    assert foreign_member.problem is not None
    assert "metadata.namespace" in foreign_member.problem[1]
    # Re-reading an unchanged file gives the same digest (the pool restarts only on a change).
    again = read_members(tmp_path, "data", Shared.of(BASE))
    assert again["data/good"].digest == members["data/good"].digest
    (tmp_path / "good.yaml").write_text(
        yaml.safe_dump({**good, "spec": {**good["spec"], "trigger": {"interval": "20s"}}})
    )
    assert (
        read_members(tmp_path, "data", Shared())["data/good"].digest != members["data/good"].digest
    )


def test_a_rescan_parses_only_the_files_that_changed(tmp_path: Path) -> None:
    """The pool rescans every few seconds: unchanged files keep their parse, a changed one is
    read anew, a removed one is forgotten, and a file that is not text is reported."""
    for name in ("a", "b"):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(valid_manifest(name)))
    parsed: Parsed = {}
    first = read_members(tmp_path, "data", Shared(), parsed)
    kept = dict(parsed)
    second = read_members(tmp_path, "data", Shared(), parsed)
    assert second == first
    assert all(parsed[k] is kept[k] for k in kept)  # the same parse, not a new one
    changed = valid_manifest("a")
    changed["spec"]["trigger"] = {"interval": "20s"}
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(changed))
    (tmp_path / "b.yaml").unlink()
    (tmp_path / "c.yaml").write_bytes(b"\xff\xfe not text")
    third = read_members(tmp_path, "data", Shared(), parsed)
    pipeline = third["data/a"].pipeline
    assert pipeline is not None
    assert pipeline.ingestion.spec.trigger.pinned_seconds == 20
    assert sorted(third) == ["c.yaml", "data/a"]
    problem = third["c.yaml"].problem
    assert problem is not None
    assert "not UTF-8" in problem[1]
    assert sorted(name for name, _ in parsed) == ["a.yaml", "c.yaml"]


def test_a_pool_report_always_fits_a_pod_annotation() -> None:
    """Messages are cut; a report of hundreds of failing members keeps what the operator needs
    (phase, failures, reason, last batch, lag) and says it was trimmed."""
    member = {
        "phase": "BackingOff",
        "failures": 3,
        "reason": "Failed",
        "message": "java.lang.RuntimeException: " + "at org.apache.spark.Frame\n" * 200,
        "lastBatch": 7,
        "lag": {"at": 1.0, "records": 5, "partitions": 3},
        "freshness": {"plan": "x" * 400, "p99Seconds": 12.0},
    }
    few = fit_report({"at": 1.0, "members": {f"data/s{i}": dict(member) for i in range(3)}})
    assert "trimmed" not in few
    assert all(len(m["message"]) <= REPORT_MESSAGE_CHARS for m in few["members"].values())
    assert few["members"]["data/s0"]["freshness"] == member["freshness"]
    many = fit_report({"at": 1.0, "members": {f"data/s{i}": dict(member) for i in range(400)}})
    assert many["trimmed"] is True
    assert len(json.dumps(many, separators=(",", ":"))) <= MAX_REPORT_BYTES
    assert many["members"]["data/s399"] == {
        "phase": "BackingOff", "failures": 3, "reason": "Failed", "lastBatch": 7,
        "lag": {"at": 1.0, "records": 5, "partitions": 3},
    }  # fmt: skip


def _pool_report(revision: str = "7", **member: Any) -> dict[str, Any]:
    running = {"phase": "Running", "failures": 0, "reason": None, "message": None,
               "retryAt": None, "startedAt": 100.0, "lastBatch": 4, "busyCores": 0.01,
               "lag": {"records": 3, "at": 1.0}, "freshness": {"p99Seconds": 40.0}}  # fmt: skip
    return {"at": 1.0, "revision": revision,
            "members": {"data/a": {**running, **member}, "data/b": dict(running)}}  # fmt: skip


@pytest.mark.parametrize(
    ("later", "seconds_after", "published"),
    [
        # Figures alone wait for the heartbeat...
        (_pool_report(lastBatch=9, busyCores=0.5, lag={"records": 900, "at": 5.0}), 5, False),
        (_pool_report(freshness={"p99Seconds": 99.0}), 29, False),
        (_pool_report(lastBatch=9), 30, True),
        # ... what the operator acts on goes at once.
        (_pool_report(phase="BackingOff", failures=1, reason="StreamFailed"), 5, True),
        (_pool_report(message="Kafka unreachable"), 5, True),
        (_pool_report(startedAt=200.0), 5, True),
        (_pool_report(revision="8"), 5, True),
        ({**_pool_report(), "members": {"data/a": _pool_report()["members"]["data/a"]}}, 5, True),
    ],
)
def test_a_pool_publishes_its_report_at_once_when_its_word_changes_else_at_the_heartbeat(
    later: dict[str, Any], seconds_after: float, published: bool
) -> None:
    pacer = ReportPacer(heartbeat_seconds=30)
    assert pacer.due(_pool_report(), now=1000)  # the first report always goes
    pacer.said(_pool_report(), now=1000)
    assert pacer.due(_pool_report(), now=1000 + seconds_after) is (seconds_after >= 30)
    assert pacer.due(later, now=1000 + seconds_after) is published
