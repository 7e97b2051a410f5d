"""The operator's stream pools, without a cluster: what a pool pod is made of, which streams
share one, how a pool's report is read, and what it means for a member's conditions."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from deltaflow_api import DeltaIngestion
from deltaflow_api.channel import POOL_REPORT_ANNOTATION
from deltaflow_api.driver_pod import SPARK_AUTH_DIRECTORY
from deltaflow_api.reasons import Reason
from deltaflow_operator.autoscaler.observe import MemberReport, PoolReport, parse_pool_report
from deltaflow_operator.builders import driver as driver_builders
from deltaflow_operator.builders import pool as builders
from deltaflow_operator.decisions.cost import member_cost_status
from deltaflow_operator.decisions.pooled import BatchSighting, member_verdict
from deltaflow_operator.pool_keeper import (
    SILENT_POOL_SECONDS,
    KnownPool,
    is_pool_pod,
    pool_pod_signal,
    pool_report_of,
    settled_after,
    silent_for,
    silent_pool_holds,
)
from deltaflow_operator.settings import Settings
from support.manifests import valid_manifest

NOW = 1_800_000_000.0


def ingestion(name: str = "orders", namespace: str = "data", **spec: Any) -> DeltaIngestion:
    manifest = valid_manifest()
    manifest["metadata"].update(name=name, namespace=namespace, uid=f"uid-{name}")
    manifest["spec"].update(spec)
    return DeltaIngestion.model_validate(manifest)


def test_streams_share_a_pool_only_with_the_same_namespace_object_store_and_image() -> None:
    settings = Settings()
    base = builders.group_of(ingestion("a"), settings)
    assert builders.group_of(ingestion("b"), settings) == base
    assert builders.group_of(ingestion("a", namespace="other"), settings) != base
    assert builders.group_of(ingestion("a", image="registry.example/deltaflow:2"), settings) != base
    store = {"endpoint": "http://minio:9000", "accessKeyId": {"name": "k", "key": "id"},
             "secretAccessKey": {"name": "k", "key": "secret"}}  # fmt: skip
    moved = ingestion("a", sink={**valid_manifest()["spec"]["sink"], "storage": store})
    assert builders.group_of(moved, settings) != base
    # Another operator release never shares, reads or deletes this one's pools.
    other = Settings(lease_name="deltaflow-canary")
    assert builders.group_of(ingestion("a"), other) != base
    assert builders.release_label(other) != builders.release_label(settings)


SCRAM = {
    "securityProtocol": "SASL_SSL",
    "saslMechanism": "SCRAM-SHA-512",
    "caCertificate": {"name": "kafka-ca", "key": "ca.crt"},
    "username": {"name": "orders-kafka", "key": "username"},
    "password": {"name": "orders-kafka", "key": "password"},
}
LAKE = [{"name": "lake", "claimName": "lake", "mountPath": "/lake"}]
ROLE = {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/orders"}
PLACED = {
    "nodeSelector": {"pool": "streams"},
    "tolerations": [{"key": "streams", "operator": "Exists", "effect": "NoSchedule"}],
    "priorityClassName": "ingestion",
    "labels": {"team": "orders"},
    "annotations": {"cost-center": "42"},
}


def _source(**auth: Any) -> dict[str, Any]:
    return {**valid_manifest()["spec"]["source"], "auth": {**SCRAM, **auth}}


# What a pool's pod carries for all its members: (case, spec of a and of b, whether they share)
CARRIED = [
    ("the same credentials", {"source": _source()}, {"source": _source()}, True),
    ("credentials and none", {"source": _source()}, {}, False),
    (
        "another Secret for the password",
        {"source": _source()},
        {"source": _source(password={"name": "billing-kafka", "key": "password"})},
        False,
    ),
    ("the same volume", {"volumes": LAKE}, {"volumes": LAKE}, True),
    ("a volume and none", {"volumes": LAKE}, {}, False),
    (
        "a workload identity and none",
        {"serviceAccount": {"annotations": ROLE}},
        {},
        False,
    ),
    (
        "the same workload identity",
        {"serviceAccount": {"annotations": ROLE}},
        {"serviceAccount": {"annotations": ROLE}},
        True,
    ),
    ("an image pull secret and none", {"imagePullSecrets": [{"name": "registry"}]}, {}, False),
    ("a node selector and none", {"driver": {"pod": {"nodeSelector": {"a": "b"}}}}, {}, False),
    ("a pod label and none", {"driver": {"pod": {"labels": {"team": "a"}}}}, {}, False),
    # The driver's size is no pool's business: the pool is sized by the chart.
    ("another driver size", {"driver": {"memory": "4g"}}, {}, True),
]


@pytest.mark.parametrize(("a", "b", "share"), [c[1:] for c in CARRIED], ids=[c[0] for c in CARRIED])
def test_streams_share_a_pool_only_when_it_carries_the_same_for_both(
    a: dict[str, Any], b: dict[str, Any], share: bool
) -> None:
    settings = Settings()
    first, second = (
        builders.group_of(ingestion("a", **a), settings),
        builders.group_of(ingestion("b", **b), settings),
    )
    assert (first == second) is share


def test_a_pool_pod_carries_its_members_credentials_volumes_identity_and_placement() -> None:
    spec = {
        "source": _source(),
        "volumes": LAKE,
        "serviceAccount": {"annotations": ROLE},
        "imagePullSecrets": [{"name": "registry"}],
        "driver": {"pod": PLACED},
    }
    members = (ingestion("a", **spec), ingestion("b", **spec))
    pool = builders.Pool("data", "deltaflow-pool-1234abcd-0", members, 3)
    settings = Settings()
    pod = builders.pod(pool, settings, "cm-uid")
    pod_spec = pod["spec"]
    volumes = {v["name"]: v for v in pod_spec["volumes"]}
    secrets = {v["secret"]["secretName"] for v in volumes.values() if "secret" in v}
    assert secrets == {"kafka-ca", "orders-kafka"}
    # Optional and group-readable, as a driver's: a missing Secret is named by the member.
    assert all(v["secret"]["optional"] for v in volumes.values() if "secret" in v)
    assert volumes["lake"]["persistentVolumeClaim"] == {"claimName": "lake"}
    mounts = {m["mountPath"]: m for m in pod_spec["containers"][0]["volumeMounts"]}
    assert "/lake" in mounts
    # The driver's own mount paths: the runtime finds its files where a driver would.
    driver = driver_builders.driver_pod(members[0], settings)
    driver_mounts = {m["mountPath"] for m in driver["spec"]["containers"][0]["volumeMounts"]}
    # (Not Spark's secret: a pool runs in local mode, with no executors to authenticate.)
    assert driver_mounts - {builders.CONFIG_MOUNT, SPARK_AUTH_DIRECTORY} <= set(mounts)
    assert pod_spec["nodeSelector"] == {"pool": "streams"}
    assert pod_spec["tolerations"][0]["key"] == "streams"
    assert pod_spec["priorityClassName"] == "ingestion"
    assert pod_spec["imagePullSecrets"] == [{"name": "registry"}]
    assert pod["metadata"]["labels"]["team"] == "orders"
    assert pod["metadata"]["labels"]["app.kubernetes.io/component"] == "pool"
    assert pod["metadata"]["annotations"]["cost-center"] == "42"
    _, account, _ = builders.companions(pool, settings, "cm-uid")
    assert account["metadata"]["annotations"] == ROLE
    # Credentials stay references: no Secret's name appears in the members' ConfigMap as more
    # than the reference the manifest holds, and no env value holds one.
    env = pod_spec["containers"][0]["env"]
    assert all("secretKeyRef" in e.get("valueFrom", {}) for e in env if "AWS_" in e["name"])


def test_a_pool_pod_runs_its_members_restricted_with_secrets_by_reference_only() -> None:
    store = {"endpoint": "http://minio:9000", "accessKeyId": {"name": "lake", "key": "id"},
             "secretAccessKey": {"name": "lake", "key": "secret"}}  # fmt: skip
    sink = {**valid_manifest()["spec"]["sink"], "storage": store}
    members = (ingestion("a", sink=sink), ingestion("b", sink=sink))
    pool = builders.Pool("data", "deltaflow-pool-1234abcd-0", members, 7)
    settings = Settings()
    config_map = builders.config_map(pool, settings)
    assert set(config_map["data"]) == {"a.yaml", "b.yaml", "revision", "spark-defaults.conf"}
    assert config_map["data"]["revision"] == "7"
    assert "spark.driver.memory 2048m" in config_map["data"]["spark-defaults.conf"]
    # Every member owns the ConfigMap: it goes with the last of them.
    assert [o["uid"] for o in config_map["metadata"]["ownerReferences"]] == ["uid-a", "uid-b"]
    pod = builders.pod(pool, settings, "cm-uid")
    assert pod["metadata"]["labels"][builders.RELEASE_LABEL] == builders.release_label(settings)
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "cm-uid"
    container = pod["spec"]["containers"][0]
    assert container["args"][:3] == ["pool", "--members", builders.MEMBERS_MOUNT]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    env = {e["name"]: e for e in container["env"]}
    assert env["DELTAFLOW_SPARK_MASTER"]["value"] == "local[1]"
    assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": "lake", "key": "secret"
    }  # fmt: skip
    assert "value" not in env["AWS_SECRET_ACCESS_KEY"]
    # A new revision touches the pod; only a new pod spec replaces it.
    later = builders.Pool("data", pool.name, members[:1], 8)
    assert builders.pod_spec_hash(later, settings) == builders.pod_spec_hash(pool, settings)
    bigger = Settings(pool_memory="4g")
    assert builders.pod_spec_hash(pool, bigger) != builders.pod_spec_hash(pool, settings)
    assert container["resources"]["requests"]["cpu"] == "1"
    # pools.coreRequest: a smaller request for the same task threads (trickles idle them).
    lighter = Settings(pool_core_request="300m")
    light = builders.pod(pool, lighter, "cm-uid")["spec"]["containers"][0]
    assert light["resources"]["requests"]["cpu"] == "300m"
    assert {e["name"]: e.get("value") for e in light["env"]}["DELTAFLOW_SPARK_MASTER"] == "local[1]"
    assert builders.pod_spec_hash(pool, lighter) != builders.pod_spec_hash(pool, settings)
    policy, account, binding = builders.companions(pool, settings, "cm-uid")
    assert policy["spec"]["ingress"] == [
        {"ports": [{"protocol": "TCP", "port": settings.runtime_metrics_port}]}
    ]
    assert binding["roleRef"]["name"] == settings.pool_cluster_role
    assert account["metadata"]["name"] == binding["subjects"][0]["name"] == pool.name


def _report(members: dict[str, Any], **top: Any) -> str:
    return json.dumps({"at": NOW, "revision": "3", "members": members, **top})


RUNNING = {"phase": "Running", "failures": 0, "lastBatch": 4, "lag": {"at": NOW, "records": 12},
           "busyCores": 0.01, "startedAt": NOW - 600}  # fmt: skip


def test_a_pool_report_is_read_for_the_pools_namespace_only() -> None:
    report = parse_pool_report(
        _report({"data/a": RUNNING, "x.yaml": {"phase": "Invalid"}, "other/b": RUNNING}),
        "data",
        now=NOW,
    )
    assert report is not None
    assert report.revision == 3
    assert set(report.members) == {"data/a"}
    assert report.members["data/a"].lag_records == 12
    assert report.members["data/a"].started_at == NOW - 600


@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        "not json",
        "[]",
        json.dumps({"at": NOW}),  # no members
        json.dumps({"at": "yesterday", "members": {}}),
        _report({"data/a": {"phase": "Flying"}}),
        _report({"data/a": {**RUNNING, "failures": -1}}),
        _report({"data/a": {**RUNNING, "lag": {"at": NOW, "records": "many"}}}),
        _report({"data/a": {**RUNNING, "busyCores": float("nan")}}),
        _report({"data/a": {**RUNNING, "startedAt": -5}}),
        _report({f"data/m{n}": RUNNING for n in range(1001)}),
        # Stamped beyond the clock skew the operator allows: read, it would stay "newer" than
        # every later report and never go stale.
        json.dumps({"at": NOW + 3600, "revision": "3", "members": {"data/a": RUNNING}}),
    ],
)
def test_an_unsound_pool_report_is_no_report(text: str | None) -> None:
    """An unsound member voids the whole report: the pool may still run a member it lists
    badly, so nobody is released on its word."""
    assert parse_pool_report(text, "data", now=NOW) is None


def test_a_pool_report_a_little_ahead_of_the_operators_clock_is_read_as_made_now() -> None:
    ahead = parse_pool_report(_report({"data/a": RUNNING}, at=NOW + 20), "data", now=NOW)
    assert ahead is not None
    assert ahead.at == NOW
    # The pool's next report (its clock 20 s ahead still) is newer than it: the view moves on.
    keeper_now = NOW + 5
    later = parse_pool_report(_report({"data/a": RUNNING}, at=NOW + 25), "data", now=keeper_now)
    assert later is not None
    assert later.at > ahead.at


def _owned(name: str, *owners: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": name, "ownerReferences": list(owners)}}


@pytest.mark.parametrize(
    ("pod", "ours"),
    [
        (_owned("p-0", {"kind": "ConfigMap", "name": "p-0", "uid": "u", "controller": True}), True),
        (_owned("p-0"), False),  # the labels alone: anyone may set them
        (_owned("p-0", {"kind": "ConfigMap", "name": "other", "uid": "u", "controller": True}),
         False),
        # Not its controller:
        (_owned("p-0", {"kind": "ConfigMap", "name": "p-0", "uid": "u"}), False),
        (_owned("p-0", {"kind": "Deployment", "name": "p-0", "uid": "u", "controller": True}),
         False),
    ],
)  # fmt: skip
def test_a_pod_is_a_pools_only_through_its_config_map(pod: dict[str, Any], ours: bool) -> None:
    assert is_pool_pod(pod) is ours


@pytest.mark.parametrize(
    ("pool", "last_pool", "silent", "holds"),
    [
        ("p-0", None, 60.0, True),  # may still be starting: it holds every stream's move
        ("p-0", "p-1", SILENT_POOL_SECONDS - 1, True),
        ("p-0", None, SILENT_POOL_SECONDS, False),  # five minutes silent: not a stranger's
        ("p-0", "p-1", 3600.0, False),
        ("p-0", "p-0", 3600.0, True),  # the stream was last there: it may still run it
    ],
)
def test_a_silent_pool_holds_up_only_the_moves_of_streams_it_may_run(
    pool: str, last_pool: str | None, silent: float, holds: bool
) -> None:
    assert silent_pool_holds(pool, last_pool, silent) is holds


def test_a_pool_pod_is_silent_since_it_started() -> None:
    pod = {"status": {"startTime": "2027-01-15T08:00:00Z"}}
    start = datetime(2027, 1, 15, 8, 0, tzinfo=UTC).timestamp()
    assert silent_for(pod, start + 90) == 90
    assert silent_for({"status": {}}, start) == 0  # not started: as new
    assert silent_for({"status": {"startTime": "soon"}}, start) == 0


def _member(phase: str, **fields: Any) -> MemberReport:
    values: dict[str, Any] = {
        "phase": phase, "failures": 0, "reason": "", "message": "", "retry_at": None,
        "last_batch": None, "lag_records": None, "lag_at": None, "freshness": None,
        "busy_cores": None,
    }  # fmt: skip
    return MemberReport(**{**values, **fields})


VERDICTS = [
    # pool, report, reported seconds ago -> ready, degraded, reason
    (None, None, None, False, False, Reason.WAITING_FOR_POOL),
    ("p", None, None, False, False, Reason.POOL_NOT_REPORTING),
    ("p", _member("Running"), 300.0, False, True, Reason.POOL_NOT_REPORTING),
    ("p", None, 5.0, False, False, Reason.STREAM_STARTING),
    ("p", _member("Starting"), 5.0, False, False, Reason.STREAM_STARTING),
    ("p", _member("Running"), 5.0, True, False, Reason.STREAMING),
    (
        "p",
        _member("BackingOff", failures=1, reason="DriverFailed", message="boom", retry_at=NOW + 10),
        5.0,
        False,
        False,
        Reason.MEMBER_FAILED,
    ),
    (
        "p",
        _member("BackingOff", failures=3, reason="TableBehind"),
        5.0,
        False,
        True,
        Reason.TABLE_BEHIND,
    ),
    (
        "p",
        _member("NeedsAction", failures=1, reason="CheckpointLost"),
        5.0,
        False,
        True,
        Reason.CHECKPOINT_LOST,
    ),
    (
        "p",
        _member("Invalid", reason="InvalidSpec", message="spec.x"),
        5.0,
        False,
        True,
        Reason.INVALID_SPEC,
    ),
    ("p", _member("Stopping"), 5.0, False, False, Reason.LEAVING_POOL),
]


@pytest.mark.parametrize("case", VERDICTS)
def test_what_a_pools_word_means_for_its_member(
    case: tuple[str | None, MemberReport | None, float | None, bool, bool, Reason],
) -> None:
    pool, report, ago, ready, degraded, reason = case
    reported_at = None if ago is None else NOW - ago
    verdict = member_verdict(pool, report, reported_at, NOW, 3, trigger_seconds=10.0)
    assert (verdict.ready, verdict.degraded, verdict.reason) == (ready, degraded, reason)
    if pool is not None:
        assert pool in verdict.message  # says which pool, to look at its pod


TRIGGER = 10.0  # a stall: 120 s plus two intervals, 140 s
# (case, the member's lag and last batch, its batch as first seen (seconds ago, or None: not
# seen), caught up (seconds ago), its query's start (seconds ago) -> the reason)
STALLS = [
    ("commits, records waiting", 500, 7, (30.0, 7), None, 900.0, Reason.STREAMING),
    ("no commit for 150 s, records waiting", 500, 7, (150.0, 7), None, 900.0,
     Reason.STREAM_STALLED),
    ("never committed, started 150 s ago, records waiting", 500, None, (600.0, None), None,
     150.0, Reason.STREAM_STALLED),
    ("never committed, started just now", 500, None, (600.0, None), None, 30.0,
     Reason.STREAMING),
    ("caught up until a moment ago: its first batch is to come", 500, 7, (3600.0, 7), 20.0,
     3600.0, Reason.STREAMING),
    ("nothing waits (idle)", 0, 7, (3600.0, 7), 3600.0, 3600.0, Reason.STREAMING),
    ("lag not known", None, 7, (3600.0, 7), None, 3600.0, Reason.STREAMING),
    ("no sighting yet (a new leader)", 500, 7, None, None, 3600.0, Reason.STREAMING),
]  # fmt: skip


Stall = tuple[int | None, int | None, tuple[float, int | None] | None, float | None, float, Reason]


@pytest.mark.parametrize("case", [c[1:] for c in STALLS], ids=[c[0] for c in STALLS])
def test_a_pooled_member_that_commits_nothing_while_records_wait_is_stalled(case: Stall) -> None:
    """As a dedicated driver's stream is (decisions.progress): a member that gets none of the
    pool's task threads reads Ready=False StreamStalled, never Ready with no recent records."""
    lag, batch, seen, caught_up, started, reason = case
    report = _member("Running", last_batch=batch, lag_records=lag, started_at=NOW - started)
    sighting = None
    if seen is not None:
        sighting = BatchSighting(
            seen[1], NOW - seen[0], None if caught_up is None else NOW - caught_up
        )
    verdict = member_verdict(
        "p", report, NOW - 5, NOW, 3, trigger_seconds=TRIGGER, sighting=sighting
    )
    assert verdict.reason == reason, verdict
    assert verdict.ready is (reason == Reason.STREAMING)
    if reason == Reason.STREAM_STALLED:
        assert f"{lag} records wait in Kafka" in verdict.message
        assert "a stall is 140s" in verdict.message


def _pool_said(revision: int | None, **phases: str) -> PoolReport:
    def said(phase: str) -> MemberReport:
        return MemberReport(phase, 0, "", "", None, None, None, None, None, None)

    members = {f"data/{k}": said(p) for k, p in phases.items()}
    return PoolReport(at=NOW, revision=revision, members=members)


def _known(revision: int, *names: str) -> KnownPool:
    return KnownPool("data", "pool-0", {f"data/{n}": "digest" for n in names}, revision, "cm-uid")


@pytest.mark.parametrize(
    ("reports", "settled"),
    [
        ({"data/pool-0": _pool_said(7, a="Running", b="BackingOff")}, True),
        ({}, False),  # not reported yet
        ({"data/pool-0": _pool_said(6, a="Running", b="Running")}, False),  # revision not read yet
        ({"data/pool-0": _pool_said(None, a="Running", b="Running")}, False),
        ({"data/pool-0": _pool_said(7, a="Running")}, False),  # b not started yet
        ({"data/pool-0": _pool_said(7, a="Running", b="Running", c="Stopping")}, False),
        ({"data/pool-0": _pool_said(7, a="Running", b="Starting")}, False),
        # A pod of a pool gone (or of an earlier ConfigMap) still runs what it had.
        (
            {"data/pool-0": _pool_said(7, a="Running", b="Running"), "data/pool-1": _pool_said(3)},
            False,
        ),
    ],
)
def test_the_pools_are_settled_once_each_runs_exactly_its_revisions_members(
    reports: dict[str, PoolReport], settled: bool
) -> None:
    assert settled_after({"data/pool-0": _known(7, "a", "b")}, reports) is settled


def _pool_pod(report: dict[str, Any] | None, restarts: int = 0, **meta: Any) -> dict[str, Any]:
    annotations = {} if report is None else {POOL_REPORT_ANNOTATION: json.dumps(report)}
    return {
        "metadata": {"name": "pool-0", "annotations": annotations, **meta},
        "status": {"phase": "Running", "containerStatuses": [
            {"restartCount": restarts, "state": {"running": {"startedAt": "2026-11-29T10:00:00Z"}}}
        ]},
    }  # fmt: skip


def test_a_pool_pods_change_calls_for_a_round_only_when_its_word_changes() -> None:
    def signal_of(pod: dict[str, Any]) -> str:
        return pool_pod_signal(pod, pool_report_of(pod, "data", NOW))

    member = {"phase": "Running", "failures": 0, "reason": None, "lastBatch": 3, "busyCores": 0.01}
    base = {"at": NOW, "revision": "7", "members": {"data/a": member}}
    signal = signal_of(_pool_pod(base))
    # A heartbeat's new figures: no round.
    figures = {**base, "at": NOW + 30, "members": {"data/a": {**member, "lastBatch": 9}}}
    assert signal_of(_pool_pod(figures)) == signal
    # Anything the keeper or a member's conditions act on: a round.
    for changed in (
        _pool_pod({**base, "revision": "8"}),
        _pool_pod({**base, "members": {"data/a": {**member, "phase": "BackingOff"}}}),
        _pool_pod({**base, "members": {"data/a": {**member, "failures": 1}}}),
        _pool_pod({**base, "members": {}}),
        _pool_pod(base, restarts=1),
        _pool_pod(base, deletionTimestamp="2026-11-29T10:05:00Z"),
        _pool_pod(None),
        {**_pool_pod(None), "metadata": {"annotations": {POOL_REPORT_ANNOTATION: "{not json"}}},
    ):
        assert signal_of(changed) != signal


def test_a_pooled_streams_cost_is_its_task_time_of_the_pool_for_chargeback() -> None:
    said = _member("Running", busy_cores=0.015)
    cost = member_cost_status(said, NOW - 5, NOW)
    assert cost.cpu_seconds_per_hour == 54.0  # 0.015 cores for an hour
    assert cost.executor_seconds_per_hour == 0.0  # no executor pod of its own
    # Unknown, never 0, without a fresh reading.
    assert member_cost_status(_member("Running"), NOW - 5, NOW).cpu_seconds_per_hour is None
    assert member_cost_status(said, NOW - 600, NOW).cpu_seconds_per_hour is None
    assert member_cost_status(None, NOW - 5, NOW).cpu_seconds_per_hour is None
