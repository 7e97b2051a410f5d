"""Drift repair's bookkeeping: what counts as someone else's change to a child, and which marks
an apply settles."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from deltaflow_operator.drift import Drift, child_version

CRONJOB: dict[str, Any] = {
    "apiVersion": "batch/v1",
    "kind": "CronJob",
    "metadata": {
        "name": "orders-vacuum",
        "namespace": "data",
        "uid": "u1",
        "resourceVersion": "100",
        "generation": 1,
        "creationTimestamp": "2026-11-29T12:00:00Z",
        "labels": {"app.kubernetes.io/managed-by": "deltaflow-operator"},
        "managedFields": [{"manager": "deltaflow-operator", "operation": "Apply"}],
    },
    "spec": {"schedule": "0 3 * * *", "jobTemplate": {"spec": {}}},
}


def _changed(path: str, value: Any) -> dict[str, Any]:
    obj = copy.deepcopy(CRONJOB)
    *parents, leaf = path.split(".")
    node = obj
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    return obj


@pytest.mark.parametrize(
    ("situation", "seen", "same"),
    [
        ("the object as applied", CRONJOB, True),
        ("its status written by the CronJob controller (each run)",
         {**_changed("metadata.resourceVersion", "101"), "status": {"lastScheduleTime": "x"}},
         True),
        ("a new managedFields entry and generation (a controller's update)",
         _changed("metadata.managedFields", [{"manager": "kcm"}]), True),
        ("its schedule patched by someone else", _changed("spec.schedule", "0 0 1 1 *"), False),
        ("a label taken off", _changed("metadata.labels", {}), False),
        ("an annotation added", _changed("metadata.annotations", {"a": "b"}), False),
        ("being deleted", _changed("metadata.deletionTimestamp", "2026-11-29T12:01:00Z"), False),
    ],
)  # fmt: skip
def test_only_what_an_apply_decides_changes_a_childs_version(
    situation: str, seen: dict[str, Any], same: bool
) -> None:
    assert (child_version(seen) == child_version(CRONJOB)) is same, situation


APPLIED = {"CronJob/a": "v1", "Service/b": "v2"}


@pytest.mark.parametrize(
    ("situation", "child", "version", "applied", "due"),
    [
        ("its own apply's event, however late", "CronJob/a", "v1", APPLIED, False),
        ("edited by someone else", "CronJob/a", "x", APPLIED, True),
        ("deleted", "Service/b", None, APPLIED, True),
        ("not applied by this process yet: its first apply is due anyway", "CronJob/a", "x",
         None, False),
        ("an object it does not apply (an earlier operator's binding)", "RoleBinding/old", None,
         APPLIED, False),
    ],
)  # fmt: skip
def test_a_child_seen_at_another_version_than_applied_asks_for_an_apply(
    situation: str, child: str, version: str | None, applied: dict[str, str] | None, due: bool
) -> None:
    drift = Drift()
    assert drift.seen("data/orders", child, version, applied) is due, situation
    assert bool(drift.pending("data/orders")) is due


def test_an_apply_settles_what_it_put_back_and_keeps_an_edit_made_while_it_ran() -> None:
    drift = Drift()
    drift.seen("data/orders", "CronJob/a", None, APPLIED)  # deleted
    drift.seen("data/orders", "Service/b", "edited", APPLIED)
    handled = drift.pending("data/orders")
    # While the apply runs: its own events (old record still held: a mark at the new version),
    # and someone edits the Service again.
    drift.seen("data/orders", "CronJob/a", "v3", APPLIED)
    drift.seen("data/orders", "Service/b", "edited again", APPLIED)
    restored = drift.applied("data/orders", handled, {"CronJob/a": "v3", "Service/b": "v4"})
    assert restored == ["CronJob/a", "Service/b"]
    assert drift.pending("data/orders") == {"Service/b": "edited again"}
    # The next apply settles that one; nothing is left to do.
    assert drift.applied("data/orders", drift.pending("data/orders"), {"Service/b": "v5"}) == [
        "Service/b"
    ]
    assert drift.pending("data/orders") == {}


def test_a_failed_apply_keeps_the_marks() -> None:
    drift = Drift()
    drift.seen("data/orders", "CronJob/a", None, APPLIED)
    handled = drift.pending("data/orders")
    assert handled == {"CronJob/a": None}
    # The apply raised: applied() was never called, the next round sees the same marks.
    assert drift.pending("data/orders") == handled
