"""Where Spark runs: the driver pod alone (local mode) or executor pods, as scenario tables."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from deltaflow_api import DeltaIngestion
from deltaflow_api.v1alpha1 import DeltaIngestionSpec, PlacementStatus
from deltaflow_operator.builders import driver as b
from deltaflow_operator.decisions.placement import (
    DRIVER_KEEPS_UP,
    EXECUTORS_REQUIRED,
    LOCAL_DRIVER_FAILED,
    LOCAL_FAILURE_HOLD_SECONDS,
    MANUAL,
    NEEDS_EXECUTORS,
    STARTED_LOCAL,
    driver_mode,
    moved,
    place,
)
from deltaflow_operator.settings import Settings
from support.manifests import valid_manifest

NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
EARLIER = NOW - timedelta(minutes=20)


def spec(**scaling: Any) -> DeltaIngestionSpec:
    manifest = valid_manifest()
    manifest["spec"]["scaling"] = {"minExecutors": 0, "maxExecutors": 4, **scaling}
    return DeltaIngestion.model_validate(manifest).spec


def was(mode: str, reason: str) -> PlacementStatus:
    return PlacementStatus(mode=mode, since=EARLIER, reason=reason, message="before")  # type: ignore[arg-type]


LOCAL = was("local", STARTED_LOCAL)
EXECUTORS = was("executors", NEEDS_EXECUTORS)


@pytest.mark.parametrize(
    ("scenario", "scaling", "previous", "desired", "mode", "reason", "moves"),
    [
        ("a new stream that may run locally starts so", {}, None, None, "local", STARTED_LOCAL,
         False),
        ("the driver alone keeps up: it stays", {}, LOCAL, 0, "local", STARTED_LOCAL, False),
        ("the autoscaler asks for executors: it moves", {}, LOCAL, 3, "executors",
         NEEDS_EXECUTORS, True),
        ("the count moves within executors: no move", {}, EXECUTORS, 2, "executors",
         NEEDS_EXECUTORS, False),
        ("the count is back at 0: back to local", {}, EXECUTORS, 0, "local", DRIVER_KEEPS_UP,
         True),
        ("no decision this round (driver not reporting): as it was", {}, EXECUTORS, None,
         "executors", NEEDS_EXECUTORS, False),
        ("minExecutors just became 0, no count yet: stays on executors, says why",
         {}, was("executors", EXECUTORS_REQUIRED), None, "executors", NEEDS_EXECUTORS, False),
        ("minExecutors 1: always executors", {"minExecutors": 1}, None, None, "executors",
         EXECUTORS_REQUIRED, False),
        ("minExecutors raised while local: moves to executors", {"minExecutors": 1}, LOCAL, 0,
         "executors", EXECUTORS_REQUIRED, True),
        ("manual 0: local", {"mode": "manual", "executors": 0}, None, 2, "local", MANUAL, False),
        ("manual 2 while local: executors", {"mode": "manual", "executors": 2}, LOCAL, 2,
         "executors", EXECUTORS_REQUIRED, True),
    ],
)  # fmt: skip
def test_placement_follows_the_spec_and_the_autoscalers_count(
    *,
    scenario: str,
    scaling: dict[str, Any],
    previous: PlacementStatus | None,
    desired: int | None,
    mode: str,
    reason: str,
    moves: bool,
) -> None:
    placed = place(spec(**scaling), previous, desired, "lag 40 s over a 30 s target", NOW)
    assert (placed.mode, placed.reason, moved(previous, placed)) == (mode, reason, moves), scenario
    # A move starts a new "since"; staying keeps it, so an unchanged stream writes no status.
    if previous is not None and previous.mode == mode:
        assert placed.since == EARLIER, scenario
    else:
        assert placed.since == NOW, scenario
    # A new driver starts where the placement says.
    assert driver_mode(spec(**scaling), placed) == mode, scenario


def test_a_driver_that_keeps_failing_in_local_mode_moves_to_executors_and_stays_a_while() -> None:
    """Unknown counts (a failing driver does not report) would leave it local for ever: its
    failures move it, and the count may bring it back only after the hold."""
    once = place(spec(), LOCAL, None, "", NOW, driver_failures=1)
    assert once.mode == "local"  # one failure: a restart may do
    moved_out = place(spec(), LOCAL, None, "", NOW, driver_failures=2)
    assert (moved_out.mode, moved_out.reason) == ("executors", LOCAL_DRIVER_FAILED)
    assert "failed 2 times in a row in local mode" in moved_out.message
    soon = NOW + timedelta(seconds=LOCAL_FAILURE_HOLD_SECONDS - 60)
    assert place(spec(), moved_out, 0, "idle", soon) == moved_out  # held
    later = NOW + timedelta(seconds=LOCAL_FAILURE_HOLD_SECONDS + 60)
    assert place(spec(), moved_out, 0, "idle", later).mode == "local"


def test_a_move_says_why_in_the_autoscalers_words() -> None:
    up = place(spec(), LOCAL, 3, "lag 40 s over a 30 s target", NOW)
    assert up.message == "moved to 3 executor pod(s): lag 40 s over a 30 s target"
    down = place(spec(), EXECUTORS, 0, "0 executors carry 12 rec/s", NOW)
    assert "the driver alone keeps the lag target" in down.message


def test_the_placement_is_the_drivers_master_and_part_of_its_hash() -> None:
    settings = Settings(image="deltaflow:1")
    manifest = valid_manifest()
    manifest["metadata"]["uid"] = "u1"
    manifest["spec"]["scaling"] = {"minExecutors": 0, "maxExecutors": 4}
    manifest["spec"]["driver"] = {"cores": 2, "memory": "1g"}
    local = DeltaIngestion.model_validate({**manifest, "status": {"placement": {"mode": "local"}}})
    remote = DeltaIngestion.model_validate(
        {**manifest, "status": {"placement": {"mode": "executors"}}}
    )

    def env(ingestion: DeltaIngestion) -> dict[str, str]:
        container = b.driver_pod(ingestion, settings)["spec"]["containers"][0]
        return {e["name"]: e.get("value", "") for e in container["env"]}

    assert env(local)["DELTAFLOW_SPARK_MASTER"] == "local[2]"  # spec.driver.cores threads
    assert env(remote)["DELTAFLOW_SPARK_MASTER"] == "k8s://in-cluster"
    assert b.driver_pod(local, settings)["metadata"]["annotations"]["deltaflow.io/spark-mode"] == (
        "local"
    )
    # A move is a new driver: the hash the operator compares with the running pod's moves.
    assert b.driver_spec_hash(local, settings) != b.driver_spec_hash(remote, settings)
    # A driver on executor pods starts with at least one, whatever the minimum.
    assert b.spark_conf(remote, settings)["spark.executor.instances"] == "1"
