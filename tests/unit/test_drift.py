"""Drift repair's bookkeeping: what counts as someone else's change to a child, and which marks
an apply settles."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from deltaflow_operator.drift import Drift, child_version, restore_waits, restored_at

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
OWNER = "data/orders"


def _applied_once() -> Drift:
    drift = Drift()
    drift.applied(OWNER, drift.pending(OWNER), APPLIED)
    return drift


@pytest.mark.parametrize(
    ("situation", "child", "version", "due"),
    [
        ("its own apply's event, however late", "CronJob/a", "v1", False),
        ("edited by someone else", "CronJob/a", "x", True),
        ("deleted", "Service/b", None, True),
        ("an object it does not apply (an earlier operator's binding)", "RoleBinding/old", None,
         False),
    ],
)  # fmt: skip
def test_a_child_seen_at_another_version_than_applied_asks_for_an_apply(
    situation: str, child: str, version: str | None, due: bool
) -> None:
    drift = _applied_once()
    assert drift.seen(OWNER, child, version) is due, situation
    assert (drift.pending(OWNER).children == (child,)) is due


def test_nothing_is_marked_before_the_owners_first_apply_in_this_process() -> None:
    drift = Drift()  # a new leader's initial listing: its first apply is due anyway
    assert drift.seen(OWNER, "CronJob/a", "x") is False
    assert drift.pending(OWNER).children == ()


def test_a_child_put_back_by_someone_else_needs_no_apply() -> None:
    drift = _applied_once()
    drift.seen(OWNER, "CronJob/a", "x")
    drift.seen(OWNER, "CronJob/a", "v1")  # reverted to what was applied
    assert drift.pending(OWNER).children == ()


def test_an_apply_settles_what_it_put_back_and_keeps_an_edit_made_while_it_ran() -> None:
    drift = _applied_once()
    drift.seen(OWNER, "CronJob/a", None)  # deleted
    drift.seen(OWNER, "Service/b", "edited")
    before = drift.pending(OWNER)
    # While the apply runs: its own events (against the versions of the last apply), and
    # someone deletes the CronJob again, as it was deleted before.
    drift.seen(OWNER, "Service/b", "v4")
    drift.seen(OWNER, "CronJob/a", "v3")
    drift.seen(OWNER, "CronJob/a", None)
    restored = drift.applied(OWNER, before, {"CronJob/a": "v3", "Service/b": "v4"})
    assert restored == ["CronJob/a", "Service/b"]
    assert drift.pending(OWNER).children == ("CronJob/a",)
    # The next apply settles that one; nothing is left to do.
    assert drift.applied(OWNER, drift.pending(OWNER), {"CronJob/a": "v5", "Service/b": "v4"}) == [
        "CronJob/a"
    ]
    assert drift.pending(OWNER).children == ()
    assert drift.seen(OWNER, "CronJob/a", "v5") is False  # its own event, after the apply


def test_a_failed_apply_keeps_the_marks_and_a_forgotten_owner_has_none() -> None:
    drift = _applied_once()
    drift.seen(OWNER, "CronJob/a", None)
    before = drift.pending(OWNER)
    # The apply raised: applied() was never called, the next round sees the same marks.
    assert drift.pending(OWNER).children == before.children == ("CronJob/a",)
    drift.forget(OWNER)  # deleted, or another operator serves it now
    assert drift.pending(OWNER).children == ()
    assert drift.seen(OWNER, "CronJob/a", "x") is False


@pytest.mark.parametrize(
    ("situation", "restores", "waits"),
    [
        ("never restored", (), False),
        ("a burst of edits: the first restores", (990.0,), False),
        ("two restores in 5 min", (800.0, 990.0), False),
        ("three in 5 min, the last 10 s ago: a fight, wait", (710.0, 800.0, 990.0), True),
        ("three in 5 min, the last 30 s ago: again", (710.0, 800.0, 970.0), False),
        ("three, the first out of the window", (690.0, 800.0, 990.0), False),
    ],
)  # fmt: skip
def test_restores_are_spaced_only_when_another_writer_keeps_changing_the_children(
    situation: str, restores: tuple[float, ...], waits: bool
) -> None:
    assert restore_waits(restores, 1000.0) is waits, situation


def test_restores_outside_the_window_are_forgotten() -> None:
    assert restored_at((100.0, 800.0), 1000.0) == (800.0, 1000.0)
