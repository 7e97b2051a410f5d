"""The operator against the real API server: apply, observe, change, fail, suspend, delete."""

from __future__ import annotations

import json
import os
import signal
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from deltaflow_api.cadence import plan_trigger, window_seconds
from deltaflow_runtime.cli import failed_with
from deltaflow_runtime.errors import DeltaflowError
from deltaflow_runtime.executors import ExecutorTotals
from deltaflow_runtime.freshness import BatchAges, FreshnessWindow
from deltaflow_runtime.guard import CheckpointMismatchError
from deltaflow_runtime.maintenance import ENV_TERMINATION_LOG
from deltaflow_runtime.scaling_agent import driver_report
from support.operator_harness import OperatorUnderTest, load_example, restricted_namespace, wait_for
from support.pod_watch import PodWatch

NS = "data"
CHILD_KINDS = [
    ("pod", "orders-driver"),
    ("service", "orders-driver"),
    ("serviceaccount", "orders-deltaflow-driver"),
    ("rolebinding", "orders-deltaflow-driver"),
    ("configmap", "orders-config"),
    ("cronjob", "orders-optimize"),
    ("cronjob", "orders-vacuum"),
]


@pytest.fixture(scope="module")
def orders(operator: OperatorUnderTest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The example DeltaIngestion applied in a restricted namespace, its children created."""
    restricted_namespace(operator.kube, NS)
    table_root = tmp_path_factory.mktemp("lake")
    manifest = load_example(NS, "orders", table_root)
    operator.apply(manifest)
    wait_for("the driver pod", lambda: operator.get("pod", "orders-driver", NS), timeout=30)
    return manifest


def driver_uid(op: OperatorUnderTest) -> str | None:
    pod = op.get("pod", "orders-driver", NS)
    return (
        None if pod is None or pod["metadata"].get("deletionTimestamp") else pod["metadata"]["uid"]
    )


def test_apply_creates_every_child_with_owner_references(
    operator: OperatorUnderTest, orders: dict[str, Any]
) -> None:
    owner = operator.get("deltaingestion", "orders", NS)
    assert owner is not None
    for kind, name in CHILD_KINDS:
        child = wait_for(f"{kind}/{name}", lambda k=kind, n=name: operator.get(k, n, NS))
        refs = child["metadata"]["ownerReferences"]
        assert refs == [
            {
                "apiVersion": "deltaflow.io/v1alpha1",
                "kind": "DeltaIngestion",
                "name": "orders",
                "uid": owner["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        assert child["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "deltaflow-operator"
    pod = operator.get("pod", "orders-driver", NS)
    assert pod is not None
    container = pod["spec"]["containers"][0]
    assert container["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["args"] == ["stream", "--config", "/etc/deltaflow/ingestion.yaml"]


def test_a_child_deleted_or_edited_outside_the_operator_is_put_back_within_seconds(
    operator: OperatorUnderTest, orders: dict[str, Any]
) -> None:
    managed = "app.kubernetes.io/managed-by"
    for kind, name in (("cronjob", "orders-vacuum"), ("service", "orders-driver")):
        wait_for(f"{kind}/{name}", lambda k=kind, n=name: operator.get(k, n, NS))
    schedule = operator.get("cronjob", "orders-vacuum", NS)["spec"]["schedule"]
    # Deleted; a field changed by another manager; the operator's label taken off (which takes
    # it out of the operator's watch: the API server reports that as a delete).
    operator.kube.kubectl("-n", NS, "delete", "cronjob", "orders-optimize", "--wait=false")
    operator.kube.kubectl(
        "-n", NS, "patch", "cronjob", "orders-vacuum", "-p", '{"spec":{"schedule":"0 0 1 1 *"}}'
    )  # fmt: skip
    operator.kube.kubectl("-n", NS, "label", "service", "orders-driver", f"{managed}-")
    wait_for(
        "the CronJob back",
        lambda: (c := operator.get("cronjob", "orders-optimize", NS))
        and not c["metadata"].get("deletionTimestamp"),
        timeout=30,
    )  # fmt: skip
    wait_for(
        "the schedule back",
        lambda: operator.get("cronjob", "orders-vacuum", NS)["spec"]["schedule"] == schedule,
        timeout=30,
    )
    wait_for(
        "the label back",
        lambda: operator.get("service", "orders-driver", NS)["metadata"]["labels"].get(managed),
        timeout=30,
    )
    said = [e["message"] for e in operator.events("orders", NS) if e["reason"] == "ChildRestored"]
    assert any("CronJob/orders-optimize" in m for m in said), said


def test_status_columns_conditions_and_events(
    operator: OperatorUnderTest, orders: dict[str, Any]
) -> None:
    wait_for(
        "Progressing=True",
        lambda: (operator.condition("orders", NS, "Progressing") or {}).get("status") == "True",
    )
    table = operator.kube.kubectl("-n", NS, "get", "deltaingestions").stdout
    header = table.splitlines()[0].split()
    assert header[:8] == [
        "NAME", "READY", "REASON", "LAG", "LAG(S)", "EXECUTORS", "DESIRED", "FRESH(P99)"
    ], table  # fmt: skip
    obj = operator.get("deltaingestion", "orders", NS)
    assert obj is not None
    status = obj["status"]
    assert status["observedGeneration"] == obj["metadata"]["generation"]
    types = {c["type"] for c in status["conditions"]}
    assert {"Ready", "Progressing", "Degraded", "Suspended", "Scaling"} <= types
    # This manifest's broker does not exist and no driver reports: nothing measured is shown
    # as a number (absent, never 0), and the executor count is not decided.
    assert "records" not in status.get("lag", {}), status.get("lag")
    assert "current" not in status.get("executors", {}), status.get("executors")
    assert operator.condition("orders", NS, "Scaling")["reason"] == "DriverNotRunning"
    for cond in status["conditions"]:
        assert set(cond) >= {
            "type",
            "status",
            "reason",
            "message",
            "lastTransitionTime",
            "observedGeneration",
        }
    assert status["checkpointPath"].endswith("/_checkpoints/data/orders")
    reasons = {e["reason"] for e in operator.events("orders", NS)}
    assert {"ResourcesCreated", "DriverCreated"} <= reasons

    # A kubelet reports the driver running: not Ready yet, a running pod is not a stream.
    started = datetime.now(UTC)
    operator.set_pod_phase(
        "orders-driver",
        NS,
        "Running",
        containerStatuses=[
            {
                "name": "driver",
                "image": "deltaflow:test",
                "imageID": "",
                "ready": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": started.isoformat()}},
            }
        ],
    )
    wait_for(
        "Ready=False StreamStarting",
        lambda: (operator.condition("orders", NS, "Ready") or {}).get("reason") == "StreamStarting",
    )
    # The driver reports a committed batch: Ready, and `kubectl wait` sees it. Its batches take
    # 40 s: the example's 30 s freshness target cannot hold, and the condition says what would.
    now = time.time()
    slow = _slow_batches(now)
    _report(operator, _driver_report(at=now, last_batch=0, last_batch_at=now, freshness=slow))
    operator.kube.kubectl(
        "-n", NS, "wait", "--for=condition=Ready", "deltaingestion/orders", "--timeout=30s"
    )
    freshness = wait_for(
        "Freshness=False TargetUnreachable",
        lambda: (
            (c := operator.condition("orders", NS, "Freshness"))
            and c["reason"] == "TargetUnreachable"
            and c
        ),
    )
    assert freshness["status"] == "False"
    assert "set spec.freshness.targetSeconds to 68 or more" in freshness["message"], freshness
    shown = operator.get("deltaingestion", "orders", NS)["status"]["freshness"]
    assert (shown["targetSeconds"], shown["batchSeconds"]) == (30, 40.0), shown
    assert shown["p99Seconds"] > 30
    # Reports go on, batches stop, and they carry no Kafka offsets (no broker): Unknown.
    _report(operator, _driver_report(at=time.time(), last_batch=0, last_batch_at=now - 900))
    unknown = wait_for(
        "Ready=Unknown ProgressUnknown",
        lambda: (c := operator.condition("orders", NS, "Ready")) and c["status"] == "Unknown" and c,
    )
    assert unknown["reason"] == "ProgressUnknown"
    described = operator.kube.kubectl("-n", NS, "describe", "deltaingestion", "orders").stdout
    assert "DriverCreated" in described


def _terminated(exit_code: int, message: str) -> dict[str, Any]:
    """A driver container's status after it exited, as a kubelet reports it."""
    state = {"terminated": {"exitCode": exit_code, "reason": "Error", "message": message}}
    return {
        "containerStatuses": [
            {
                "name": "driver",
                "image": "deltaflow:test",
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": state,
            }
        ]
    }


def _driver_report(
    *, at: float, last_batch: int, last_batch_at: float, freshness: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A report as the runtime's scaling agent builds it: one executor, no Kafka offsets."""
    totals = ExecutorTotals(registered=["1"], cores=1, busy_core_seconds=0.0, failed_tasks=0)
    return driver_report(
        at=at, query_id="q", run_id="r", last_batch=last_batch, last_batch_at=last_batch_at,
        target=1, totals=totals, released=0, capacity=None, executor_start_seconds=None,
        kafka=None, freshness=freshness,
    )  # fmt: skip


def _slow_batches(now: float) -> dict[str, Any]:
    """The report's freshness part as the runtime builds it, of a driver whose batches of a
    trickle each took 40 s (against the example's 30 s target)."""
    target = 30
    window = FreshnessWindow(window_seconds(target))
    for i in range(5):
        committed = now - 50 * (5 - i)
        window.add(BatchAges(committed, youngest=40.0, oldest=45.0, rows=10, batch_seconds=40.0))
    plan = plan_trigger(target, window.batch_seconds())
    assert not plan.reachable
    return window.report(now, plan, target)


def _runtime_failure(error: DeltaflowError, folder: Path) -> dict[str, Any]:
    """The driver container's status after the runtime stopped for ``error``: its exit code and
    the termination message the runtime's own CLI code wrote."""
    log = folder / "termination-log"
    before = os.environ.get(ENV_TERMINATION_LOG)
    os.environ[ENV_TERMINATION_LOG] = str(log)
    try:
        code = failed_with(error)
    finally:
        if before is None:
            os.environ.pop(ENV_TERMINATION_LOG)
        else:
            os.environ[ENV_TERMINATION_LOG] = before
    return _terminated(code, log.read_text())


def _report(op: OperatorUnderTest, report: dict[str, Any]) -> None:
    """Publish a driver report on the driver pod, as the runtime's scaling agent does."""
    op.kube.kubectl(
        "-n", NS, "annotate", "pod", "orders-driver", "--overwrite",
        f"deltaflow.io/driver-report={json.dumps(report)}",
    )  # fmt: skip


def _patch_spec(op: OperatorUnderTest, patch: dict[str, Any]) -> None:
    op.kube.kubectl(
        "-n",
        NS,
        "patch",
        "deltaingestion",
        "orders",
        "--type=merge",
        "-p",
        json.dumps({"spec": patch}),
    )


def test_scaling_change_keeps_the_driver(
    operator: OperatorUnderTest, orders: dict[str, Any]
) -> None:
    before = wait_for("driver uid", lambda: driver_uid(operator))
    _patch_spec(operator, {"scaling": {"maxExecutors": 12}})
    wait_for(
        "ConfigUpdated event",
        lambda: any(
            e["reason"] == "ConfigUpdated" and "spec.scaling.maxExecutors" in e["message"]
            for e in operator.events("orders", NS)
        ),
    )
    # The new bound reached the driver's config in place, the status saw the new generation,
    # and the driver pod is still the same one.
    obj = operator.get("deltaingestion", "orders", NS)
    assert obj is not None
    generation = obj["metadata"]["generation"]
    wait_for(
        "status of the new generation",
        lambda: (
            (operator.get("deltaingestion", "orders", NS) or {})
            .get("status", {})
            .get("observedGeneration")
            == generation
        ),
    )
    config = operator.get("configmap", "orders-config", NS)
    assert config is not None
    assert "maxExecutors: 12" in config["data"]["ingestion.yaml"]
    assert driver_uid(operator) == before


def test_executor_memory_change_replaces_the_driver_exactly_once(
    operator: OperatorUnderTest, orders: dict[str, Any]
) -> None:
    before = wait_for("driver uid", lambda: driver_uid(operator))
    watch = PodWatch(operator.kube, NS, "app.kubernetes.io/component=driver")
    wait_for("the watch to list the driver", lambda: watch.events, timeout=30)
    _patch_spec(operator, {"executor": {"memory": "3g"}})
    after = wait_for("a new driver", lambda: (u := driver_uid(operator)) != before and u)
    time.sleep(3)
    watch.stop()
    assert driver_uid(operator) == after
    new_uids = {uid for kind, uid in watch.events if kind == "ADDED" and uid != before}
    assert new_uids == {after}, watch.events
    assert watch.max_alive == 1, watch.events
    conf = operator.get("configmap", "orders-config", NS)
    assert conf is not None
    assert "spark.executor.memory 3072m" in conf["data"]["spark-defaults.conf"]
    assert any(
        e["reason"] == "DriverReplacing" and "spec.executor.memory" in e["message"]
        for e in operator.events("orders", NS)
    )


def test_suspend_and_resume(operator: OperatorUnderTest, orders: dict[str, Any]) -> None:
    wait_for("driver", lambda: driver_uid(operator))
    _patch_spec(operator, {"suspend": True})
    wait_for("driver gone", lambda: operator.get("pod", "orders-driver", NS) is None)
    wait_for(
        "Suspended=True",
        lambda: (operator.condition("orders", NS, "Suspended") or {}).get("status") == "True",
    )
    for job in ("optimize", "vacuum"):
        cron = wait_for(
            f"{job} suspended",
            lambda j=job: (
                (c := operator.get("cronjob", f"orders-{j}", NS)) and c["spec"]["suspend"] and c
            ),
        )
        assert cron["spec"]["suspend"] is True
    time.sleep(2)
    assert operator.get("pod", "orders-driver", NS) is None  # stays gone
    # What described the pod went with it (a merge patch would have kept it).
    driver_status = (operator.get("deltaingestion", "orders", NS) or {})["status"]["driver"]
    assert "phase" not in driver_status, driver_status
    assert "podName" not in driver_status, driver_status

    _patch_spec(operator, {"suspend": False})
    wait_for("driver back", lambda: driver_uid(operator))
    wait_for(
        "Suspended=False",
        lambda: (operator.condition("orders", NS, "Suspended") or {}).get("status") == "False",
    )
    cron = operator.get("cronjob", "orders-optimize", NS)
    assert cron is not None
    assert cron["spec"]["suspend"] is False


def test_failed_driver_is_replaced_with_backoff_then_degraded(
    operator: OperatorUnderTest, orders: dict[str, Any]
) -> None:
    terminated = _terminated(1, "boom: cannot reach kafka")
    uid = wait_for("driver", lambda: driver_uid(operator))
    gaps = []
    for attempt in range(1, 4):
        failed_at = time.monotonic()
        operator.set_pod_phase("orders-driver", NS, "Failed", **terminated)
        new_uid = wait_for(
            f"replacement {attempt}",
            lambda u=uid: (n := driver_uid(operator)) not in (None, u) and n,
            timeout=30,
        )
        gaps.append(time.monotonic() - failed_at)
        uid = new_uid
    # Backoff doubles: 1s, 2s, 4s (base 1s, cap 4s in this test's operator settings), and is
    # honoured: the failure is seen from the pod's watch event and the restart comes after
    # the backoff, not at the next 10 s poll.
    assert gaps[2] >= 3.5, gaps
    assert gaps[2] > gaps[0], gaps
    assert gaps[0] < 5, gaps
    degraded = wait_for(
        "Degraded=True",
        lambda: (c := operator.condition("orders", NS, "Degraded")) and c["status"] == "True" and c,
    )
    assert degraded["reason"] == "DriverCrashLooping"
    assert "boom: cannot reach kafka" in degraded["message"]
    obj = operator.get("deltaingestion", "orders", NS)
    assert obj is not None
    assert obj["status"]["driver"]["consecutiveFailures"] == 3
    assert any(e["reason"] == "DriverFailed" for e in operator.events("orders", NS))


def test_a_failure_no_restart_can_fix_is_held_until_the_pod_is_deleted(
    operator: OperatorUnderTest, orders: dict[str, Any], tmp_path: Path
) -> None:
    message = "the table is behind its checkpoint: undo the RESTORE or rebuild the checkpoint."
    terminated = _runtime_failure(CheckpointMismatchError("TableBehind", message), tmp_path)
    assert terminated["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3
    uid = wait_for("driver", lambda: driver_uid(operator), timeout=60)
    operator.set_pod_phase("orders-driver", NS, "Failed", **terminated)
    degraded = wait_for(
        "Degraded=True TableBehind",
        lambda: (c := operator.condition("orders", NS, "Degraded")) and c["reason"] == "TableBehind"
        and c,
    )  # fmt: skip
    assert message in degraded["message"]
    assert f"kubectl delete pod orders-driver -n {NS}" in degraded["message"]
    time.sleep(15)  # longer than any backoff of this operator: nothing restarts it
    assert driver_uid(operator) == uid
    assert [e["reason"] for e in operator.events("orders", NS)].count("TableBehind") == 1
    operator.kube.kubectl("-n", NS, "delete", "pod", "orders-driver", "--wait=false")
    wait_for(
        "a new driver after the delete",
        lambda: (n := driver_uid(operator)) not in (None, uid) and n,
        timeout=60,
    )


def test_operator_killed_mid_reconcile_resumes_without_duplicates(
    operator: OperatorUnderTest, orders: dict[str, Any]
) -> None:
    before = operator.get("deltaingestion", "orders", NS)
    assert before is not None
    restarts = before["status"]["driver"]["restarts"]
    old_uid = wait_for("driver", lambda: driver_uid(operator))
    leader = next(r.service for r in operator.replicas if r.service.alive())
    watch = PodWatch(operator.kube, NS, "app.kubernetes.io/component=driver")
    # Trigger work, then kill the operator while it reacts.
    _patch_spec(operator, {"trigger": {"interval": "15s"}})
    time.sleep(0.3)
    leader.proc.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
    leader.proc.wait(10)  # type: ignore[union-attr]
    operator.wait_leading(operator.start("operator-restarted"), timeout=60)
    # Whether the kill came before or after the old driver was deleted, the restarted operator
    # must finish the replacement: exactly one new driver, never two at once.
    new_uid = wait_for(
        "the replacement driver", lambda: (u := driver_uid(operator)) != old_uid and u
    )
    conf = operator.get("configmap", "orders-config", NS)
    assert conf is not None
    assert "interval: 15s" in conf["data"]["ingestion.yaml"]
    time.sleep(3)
    watch.stop()
    assert watch.max_alive == 1, watch.events
    after = operator.get("deltaingestion", "orders", NS)
    assert after is not None
    assert after["status"]["driver"]["restarts"] >= restarts  # status survived the kill
    assert driver_uid(operator) == new_uid
    added = {uid for kind, uid in watch.events if kind == "ADDED" and uid != old_uid}
    assert added == {new_uid}, watch.events


PERMISSIONS = Path(__file__).parent / "permissions"


def allowed(name: str) -> dict[str, set[str]]:
    """A checked-in allow-list: ``resource[resourceNames]`` -> verbs."""
    entries: dict[str, set[str]] = {}
    for line in (PERMISSIONS / name).read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            what, verbs = line.split(":", 1)
            entries[what.strip()] = set(verbs.split())
    return entries


def effective(op: OperatorUnderTest, who: str) -> dict[str, set[str]]:
    """``kubectl auth can-i --list`` for ``who`` in the stream's namespace, as an allow-list."""
    listing = op.kube.kubectl("-n", NS, "auth", "can-i", "--list", f"--as={who}").stdout
    entries: dict[str, set[str]] = {}
    # Rows: resource, non-resource URLs, resource names, verbs. Non-resource URL rows
    # (discovery, health) start with a blank resource column and are left out.
    for line in listing.splitlines()[1:]:
        if not line[:1].strip():
            continue
        resource, rest = line.split(None, 1)
        names = rest[rest.index("]") + 1 :].strip()  # after the non-resource URLs column
        names, verbs = names[: names.index("]") + 1], names[names.index("]") + 1 :]
        key = resource if names == "[]" else f"{resource}[{names.strip('[]')}]"
        entries.setdefault(key, set()).update(verbs.strip().strip("[]").split())
    return entries


def test_operator_permissions_are_exactly_the_checked_in_list(
    operator: OperatorUnderTest, orders: dict[str, Any]
) -> None:
    who = "system:serviceaccount:deltaflow-system:deltaflow-operator"
    assert effective(operator, who) == allowed("operator.txt")
    # No Secret at all, anywhere: not even `get` (lag comes from the driver's report).
    for verb, what in [
        ("get", "secrets"),
        ("get", "secrets --all-namespaces"),
        ("list", "secrets"),
        ("watch", "secrets"),
        ("create", "roles"),
    ]:
        answer = operator.kube.kubectl(
            "-n", NS, "auth", "can-i", verb, *what.split(), f"--as={who}", check=False
        )
        assert answer.stdout.strip() == "no", (verb, what, answer.stdout)


def test_driver_service_account_can_only_manage_its_executors(
    operator: OperatorUnderTest, orders: dict[str, Any]
) -> None:
    who = "system:serviceaccount:data:orders-deltaflow-driver"
    assert effective(operator, who) == allowed("driver.txt")
    for verb, what in [
        ("get", "secrets"),
        ("list", "secrets"),
        ("create", "services"),
        ("list", "nodes"),
        ("list", "pods --all-namespaces"),
        ("create", "pods -n default"),
    ]:
        answer = operator.kube.kubectl(
            "-n", NS, "auth", "can-i", verb, *what.split(), f"--as={who}", check=False
        )
        assert answer.stdout.strip() == "no", (verb, what, answer.stdout)


def test_secrets_reach_the_driver_by_reference_without_the_operator_reading_them(
    operator: OperatorUnderTest, tmp_path: Path
) -> None:
    # Neither Secret exists: the operator cannot read Secrets at all (its allow-list has no
    # `secrets` rule), so it creates the driver with references and the kubelet resolves them
    # (a missing one is the kubelet's CreateContainerConfigError, named by the spec field:
    # the running-pods test proves that on the real node).
    manifest = load_example(NS, "payments", tmp_path)
    manifest["spec"]["source"]["topic"] = "payments"
    manifest["spec"]["source"]["auth"] = {
        "securityProtocol": "SASL_SSL",
        "saslMechanism": "SCRAM-SHA-512",
        "username": {"name": "kafka-creds", "key": "username"},
        "password": {"name": "kafka-creds", "key": "password"},
    }
    manifest["spec"]["sink"]["storage"] = {
        "endpoint": "http://minio.example:9000",
        "pathStyleAccess": True,
        "accessKeyId": {"name": "lake-creds", "key": "AWS_ACCESS_KEY_ID"},
        "secretAccessKey": {"name": "lake-creds", "key": "AWS_SECRET_ACCESS_KEY"},
    }
    operator.apply(manifest)
    pod = wait_for("the driver pod", lambda: operator.get("pod", "payments-driver", NS))
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    # Kafka's: a file from an optional secret volume (the driver names a missing one).
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["kafka-password"]["secret"]["secretName"] == "kafka-creds"
    assert volumes["kafka-password"]["secret"]["items"] == [{"key": "password", "path": "password"}]
    assert not any(n.startswith("DELTAFLOW_KAFKA") for n in env)
    assert env["AWS_SECRET_ACCESS_KEY"] == {
        "name": "AWS_SECRET_ACCESS_KEY",
        "valueFrom": {"secretKeyRef": {"name": "lake-creds", "key": "AWS_SECRET_ACCESS_KEY"}},
    }
    operator.kube.kubectl(
        "-n", NS, "delete", "deltaingestion", "payments", "--wait=true", "--timeout=60s"
    )


def test_a_failing_reconcile_says_so_in_the_status_and_recovers(
    operator: OperatorUnderTest, tmp_path: Path
) -> None:
    ns = "quota"
    restricted_namespace(operator.kube, ns)
    # The API server refuses one child (a CronJob over the namespace's quota).
    operator.kube.kubectl(
        "-n", ns, "create", "quota", "no-cronjobs", "--hard=count/cronjobs.batch=0"
    )  # fmt: skip
    operator.apply(load_example(ns, "capped", tmp_path))
    ready = wait_for(
        "Ready=False ReconcileFailed",
        lambda: (
            (c := operator.condition("capped", ns, "Ready"))
            and c["reason"] == "ReconcileFailed"
            and c
        ),
        timeout=60,
    )
    assert ready["status"] == "False"
    assert "exceeded quota" in ready["message"], ready["message"]
    assert any(e["reason"] == "ReconcileFailed" for e in operator.events("capped", ns))
    operator.kube.kubectl("-n", ns, "delete", "quota", "no-cronjobs")
    wait_for(
        "the reconcile to succeed again",
        lambda: (
            (c := operator.condition("capped", ns, "Ready"))
            and c["reason"] != "ReconcileFailed"
            and operator.get("cronjob", "capped-optimize", ns)
        ),
        timeout=120,
    )
    operator.kube.kubectl("-n", ns, "delete", "deltaingestion", "capped", "--timeout=60s")


def test_delete_stops_the_driver_removes_every_child_and_releases_the_finalizer(
    operator: OperatorUnderTest, tmp_path: Path
) -> None:
    # That the table and checkpoint survive is shown where a driver really wrote them:
    # tests/e2e/test_running_pods.py::test_delete_and_uninstall_leave_no_pod_and_keep_the_table.
    manifest = load_example(NS, "clicks", tmp_path)
    manifest["spec"]["source"]["topic"] = "clicks"
    operator.apply(manifest)
    wait_for("clicks driver", lambda: operator.get("pod", "clicks-driver", NS))
    wait_for(
        "finalizer",
        lambda: (
            "deltaflow.io/finalizer"
            in (operator.get("deltaingestion", "clicks", NS) or {})
            .get("metadata", {})
            .get("finalizers", [])
        ),
    )

    children = [(kind, name.replace("orders", "clicks")) for kind, name in CHILD_KINDS]
    for kind, name in children:  # each exists first, so "gone" below means something
        wait_for(f"{kind}/{name}", lambda k=kind, n=name: operator.get(k, n, NS))
    operator.kube.kubectl(
        "-n", NS, "delete", "deltaingestion", "clicks", "--wait=true", "--timeout=60s"
    )
    assert operator.get("deltaingestion", "clicks", NS) is None  # finalizer released
    assert 'name="clicks"' not in operator.replicas[-1].metrics()  # no series left behind
    for kind, name in children:
        wait_for(
            f"{kind}/{name} gone", lambda k=kind, n=name: operator.get(k, n, NS) is None, timeout=60
        )
