"""Pool placement as scenario tables: a stream's place (pool or its own driver) with hysteresis,
and the packing of pooled streams into pools."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from deltaflow_api import DeltaIngestion
from deltaflow_api.cadence import window_seconds
from deltaflow_api.v1alpha1 import DeltaIngestionSpec, DeltaIngestionStatus, PlacementStatus
from deltaflow_operator.autoscaler.observe import PoolReport, parse_pool_report
from deltaflow_operator.builders import pool as builders_pool
from deltaflow_operator.decisions.placement import (
    AUTO_PLACEMENT,
    LOCAL_DRIVER_FAILED,
    STARTED_LOCAL,
    place,
)
from deltaflow_operator.decisions.pooled import pool_behind
from deltaflow_operator.decisions.pools import (
    BEHIND_WINDOW_CAP_SECONDS,
    LEAVE_AFTER_SECONDS,
    READING_SETTLE_SECONDS,
    RETURN_AFTER_SECONDS,
    STAY_TOLERANCE,
    UNPLACEABLE,
    UNPLACEABLE_HOLD_SECONDS,
    Load,
    Member,
    Placement,
    PoolLimits,
    Requested,
    auto_placement,
    choose,
    moved_between_pools,
    pack,
    settled_reading,
    wants_pool,
)
from deltaflow_operator.reconcile import status_document
from deltaflow_operator.settings import Settings
from support.manifests import valid_manifest

POOLED = Placement("pooled", 0.0, "a new stream starts in a pool until it is measured")
DEDICATED = Placement("dedicated", 0.0, "it used 0.80 cores")


def _run(
    requested: Requested, start: Placement | None, rounds: list[tuple[float, float | None, bool]]
) -> list[str]:
    """Feed (time, cores, behind) rounds; the place after each."""
    placement = start
    places: list[str] = []
    for now, cores, behind in rounds:
        placement = choose(Load(requested, cores, behind), placement, now)
        places.append(placement.where)
    return places


L, R = LEAVE_AFTER_SECONDS, RETURN_AFTER_SECONDS
# (case, requested, start, rounds (time, cores, behind), places after each round)
CHOICES = [
    ("a new stream starts pooled", "auto", None, [(0, None, False)], ["pooled"]),
    ("a trickle stays", "auto", POOLED, [(t, 0.01, False) for t in (0, L, 2 * L)],
     ["pooled"] * 3),
    ("a burst shorter than the window stays", "auto", POOLED,
     [(0, 0.9, False), (L / 2, 0.9, False), (L / 2 + 1, 0.02, False), (L + 1, 0.9, False)],
     ["pooled"] * 4),
    ("sustained growth leaves once", "auto", POOLED,
     [(0, 0.5, False), (L / 2, 0.5, False), (L, 0.5, False), (2 * L, 0.5, False)],
     ["pooled", "pooled", "dedicated", "dedicated"]),
    ("lag over its target in the pool leaves", "auto", POOLED,
     [(0, 0.05, True), (L, 0.05, True)], ["pooled", "dedicated"]),
    ("inside the band a dedicated stream stays", "auto", DEDICATED,
     [(t, 0.15, False) for t in (0, R, 2 * R)], ["dedicated"] * 3),
    ("quiet for the window it returns", "auto", DEDICATED,
     [(0, 0.02, False), (R / 2, 0.02, False), (R, 0.02, False)],
     ["dedicated", "dedicated", "pooled"]),
    ("a spike restarts the return clock", "auto", DEDICATED,
     [(0, 0.02, False), (R - 1, 0.3, False), (R, 0.02, False), (R + R / 2, 0.02, False),
      (2 * R, 0.02, False)],
     ["dedicated"] * 4 + ["pooled"]),
    ("an unmeasured round moves no clock", "auto", POOLED,
     [(0, 0.5, False), (L / 2, None, False), (L, 0.5, False)], ["pooled"] * 2 + ["dedicated"]),
    ("behind and unmeasured, a new driver's catch-up stops the return clock", "auto", DEDICATED,
     [(0, 0.02, False), (R / 2, None, True), (R, 0.02, False), (R + R / 2, 0.02, False)],
     ["dedicated"] * 4),
    ("behind and unmeasured in a pool, it leaves", "auto", POOLED,
     [(0, None, True), (L, None, True)], ["pooled", "dedicated"]),
    ("a new stream measured busy starts on its own driver", "auto", None, [(0, 0.6, False)],
     ["dedicated"]),
    ("pooled is the user's word", "pooled", DEDICATED, [(0, 2.0, True)], ["pooled"]),
    ("dedicated is the user's word", "dedicated", POOLED, [(0, 0.0, False)], ["dedicated"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("requested", "start", "rounds", "places"),
    [c[1:] for c in CHOICES],
    ids=[c[0] for c in CHOICES],
)
def test_a_streams_place_follows_its_load_with_hysteresis(
    requested: Requested,
    start: Placement | None,
    rounds: list[tuple[float, float | None, bool]],
    places: list[str],
) -> None:
    assert _run(requested, start, rounds) == places


def test_a_stream_a_pool_cannot_run_is_dedicated_whatever_it_asks_and_says_why() -> None:
    load = Load("pooled", 0.01, conflicts=("spec.sparkConf.spark.executor.memory: ...",))
    placed = choose(load, POOLED, 10.0)
    assert placed.where == "dedicated"
    assert "spec.sparkConf.spark.executor.memory" in placed.reason


def test_a_users_word_voids_the_clock_of_a_move_the_load_was_timing() -> None:
    """auto wanting out since t=0, then pooled by the user, then auto again much later: it
    leaves only after a whole window of its own, not on the first round back."""
    placement = choose(Load("auto", 0.6), POOLED, 0.0)
    assert placement.pending_since == 0.0
    placement = choose(Load("pooled", 0.6), placement, 10.0)
    assert placement.pending_since is None
    back = 10_000.0
    placement = choose(Load("auto", 0.6), placement, back)
    assert placement.where == "pooled"
    assert choose(Load("auto", 0.6), placement, back + L).where == "dedicated"


def test_an_unmoved_place_is_returned_as_it_was() -> None:
    """No move, no new object: the status is not rewritten every round."""
    assert choose(Load("auto", 0.01), POOLED, 50.0) is POOLED


LIMITS = PoolLimits(members=3, cores=0.3)


def _members(*spec: tuple[str, str, float | None]) -> list[Member]:
    return [Member(key, group, cores) for key, group, cores in spec]


# (case, members (key, group, cores), current pools, expected pools)
PACKS = [
    ("new streams spread over the pools they need, not one filled after the other",
     _members(*((f"s{i}", "g", 0.01) for i in range(5))), {},
     {"s0": "g-0", "s1": "g-1", "s2": "g-0", "s3": "g-1", "s4": "g-0"}),
    ("pools never mix groups",
     _members(("a", "g", 0.01), ("b", "h", 0.01)), {}, {"a": "g-0", "b": "h-0"}),
    ("cores bound a pool before its member count",
     _members(("big", "g", 0.2), ("mid", "g", 0.15), ("tiny", "g", 0.01)), {},
     {"big": "g-0", "mid": "g-1", "tiny": "g-1"}),
    ("members stay where they run", _members(("a", "g", 0.01), ("b", "g", 0.01)),
     {"a": "g-1", "b": "g-0"}, {"a": "g-1", "b": "g-0"}),
    ("a member gone moves nobody",
     _members(("a", "g", 0.01), ("c", "g", 0.01), ("d", "g", 0.01)),
     {"a": "g-0", "c": "g-0", "d": "g-1"}, {"a": "g-0", "c": "g-0", "d": "g-1"}),
    ("a pool outgrown moves only what no longer fits",
     _members(("a", "g", 0.2), ("b", "g", 0.2), ("c", "g", 0.01)),
     {"a": "g-0", "b": "g-0", "c": "g-0"}, {"a": "g-0", "c": "g-0", "b": "g-1"}),
    ("a newcomer takes the room a departure left",
     _members(("a", "g", 0.01), ("new", "g", None)),
     {"a": "g-0"}, {"a": "g-0", "new": "g-0"}),
    ("a member over a pool's cores still gets one (choose moves it out)",
     _members(("huge", "g", 2.0)), {}, {"huge": "g-0"}),
    ("a pool named for another group is not kept",
     _members(("a", "g", 0.01)), {"a": "h-0"}, {"a": "g-0"}),
    ("nor one whose group's name starts with the member's",
     _members(("a", "data", 0.01)), {"a": "data-minio-0"}, {"a": "data-0"}),
    ("a wobble over the limit moves nobody",
     _members(("a", "g", 0.01), ("y", "g", 0.16), ("z", "g", 0.14)),
     {"a": "g-0", "y": "g-0", "z": "g-0"}, {"a": "g-0", "y": "g-0", "z": "g-0"}),
    ("pools far apart give a busy member to the least busy",
     _members(("a", "g", 0.1), ("b", "g", 0.08), ("c", "g", 0.01)),
     {"a": "g-0", "b": "g-0", "c": "g-1"}, {"a": "g-0", "b": "g-1", "c": "g-1"}),
    ("... trade one for an idle one when a move alone would turn the gap round",
     _members(("a", "g", 0.1), ("b", "g", 0.1), ("c", "g", 0.01)),
     {"a": "g-0", "b": "g-0", "c": "g-1"}, {"a": "g-1", "b": "g-0", "c": "g-0"}),
    ("... or swap it for an idle one when that pool is full",
     _members(("a", "g", 0.1), ("b", "g", 0.1), ("i", "g", 0.001), ("j", "g", 0.001),
              ("k", "g", 0.001), ("l", "g", 0.001)),
     {"a": "g-0", "b": "g-0", "i": "g-0", "j": "g-1", "k": "g-1", "l": "g-1"},
     {"a": "g-1", "b": "g-0", "i": "g-0", "j": "g-0", "k": "g-1", "l": "g-1"}),
    ("pools a little apart stay as they are",
     _members(("a", "g", 0.06), ("b", "g", 0.05), ("c", "g", 0.04), ("d", "g", 0.04)),
     {"a": "g-0", "b": "g-0", "c": "g-1", "d": "g-1"},
     {"a": "g-0", "b": "g-0", "c": "g-1", "d": "g-1"}),
    ("a member not measured yet is not moved to even pools out",
     _members(("a", "g", None), ("b", "g", None), ("c", "g", 0.001)),
     {"a": "g-0", "b": "g-0", "c": "g-1"}, {"a": "g-0", "b": "g-0", "c": "g-1"}),
    ("a newcomer goes to a running pool with room, not into a gap an emptied pool left",
     _members(("a", "g", 0.01), ("b", "g", 0.01), ("new", "g", 0.01)),
     {"a": "g-0", "b": "g-2"}, {"a": "g-0", "b": "g-2", "new": "g-0"}),
    ("the member that grew is the one that moves",
     _members(("a", "g", 0.01), ("y", "g", 0.25), ("z", "g", 0.14)),
     {"a": "g-0", "y": "g-0", "z": "g-0"}, {"a": "g-0", "z": "g-0", "y": "g-1"}),
]  # fmt: skip


@pytest.mark.parametrize(
    ("members", "current", "expected"), [c[1:] for c in PACKS], ids=[c[0] for c in PACKS]
)
def test_packing_pooled_streams(
    members: list[Member], current: dict[str, str], expected: dict[str, str]
) -> None:
    packed = pack(members, current, LIMITS)
    assert packed == expected
    # Stable: packing what it decided again moves nothing.
    assert pack(members, packed, LIMITS) == packed
    # Within the limits, but for a pool of one oversized member.
    for pool in set(packed.values()):
        inside = [m for m in members if packed[m.key] == pool]
        assert len(inside) <= LIMITS.members
        if len(inside) > 1:  # members that stayed have the tolerance
            assert sum(m.cores or 0.02 for m in inside) <= LIMITS.cores * STAY_TOLERANCE + 1e-9


SIZED = PoolLimits(members=20, cores=1.0, size=1000)


@pytest.mark.parametrize(
    ("sizes", "current", "pools"),
    [
        ([300] * 6, {}, 2),  # 1,800 bytes of members: two pools, though 20 members would fit
        ([400] * 3, {"s0": "g-0", "s1": "g-0", "s2": "g-0"}, 2),  # a pool grown past it splits
        ([900, 200], {}, 2),  # the large one alone
        ([1500], {}, 1),  # one larger than a pool: alone in one, the best there is
        ([100] * 9, {}, 1),  # under the limit: one pool
    ],
)
def test_a_member_list_that_would_pass_the_config_map_limit_splits_the_pool(
    sizes: list[int], current: dict[str, str], pools: int
) -> None:
    members = [Member(f"s{i}", "g", 0.01, size) for i, size in enumerate(sizes)]
    packed = pack(members, current, SIZED)
    assert len(set(packed.values())) == pools, packed
    for pool in set(packed.values()):
        inside = [m for m in members if packed[m.key] == pool]
        assert len(inside) == 1 or sum(m.size for m in inside) <= SIZED.size, (pool, inside)
    assert pack(members, packed, SIZED) == packed  # and it stays so


def test_a_members_size_in_its_pool_is_what_its_config_map_entry_takes() -> None:
    """The measure pack holds pools to is the ConfigMap's: the member's key and document, and
    its owner reference in the ConfigMap's metadata."""
    manifest = valid_manifest()
    manifest["metadata"]["uid"] = "6f1c3c9e-0000-4000-8000-000000000001"
    small = DeltaIngestion.model_validate(manifest)
    pool = builders_pool.Pool("data", "p-0", (small,), 1)
    entry = builders_pool.config_map(pool, Settings())["data"][builders_pool.member_file(small)]
    assert len(entry) < builders_pool.member_bytes(small) < len(entry) + 400
    owners = builders_pool.config_map(pool, Settings())["metadata"]["ownerReferences"]
    assert builders_pool.member_bytes(small) >= len(entry) + len(json.dumps(owners[0]))


# --- spec.placement auto through status.placement (the reconcile's and the keeper's view) ---

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def _spec(placement: str = "auto", **spec: Any) -> DeltaIngestionSpec:
    manifest = valid_manifest()
    manifest["spec"] |= {"placement": placement, **spec}
    return DeltaIngestion.model_validate(manifest).spec


def _merge(stored: Any, patch: Any) -> Any:
    """A JSON merge patch (RFC 7386), as the API server applies the status write."""
    if not isinstance(patch, dict):
        return patch
    merged = dict(stored) if isinstance(stored, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = _merge(merged.get(key), value)
    return merged


def _stored(before: PlacementStatus, after: PlacementStatus) -> PlacementStatus:
    """``after`` as the next round reads it back: written over ``before`` as the reconcile
    writes a status (reconcile.status_document, a merge patch)."""
    document = status_document(DeltaIngestionStatus(placement=after))["placement"]
    stored = _merge(before.model_dump(by_alias=True, mode="json", exclude_none=True), document)
    return PlacementStatus.model_validate(stored)


def _rounds(
    spec: DeltaIngestionSpec,
    start: PlacementStatus,
    rounds: list[tuple[float, float | None, bool]],
    *,
    desired: int | None = None,
    failures: int = 0,
) -> list[PlacementStatus]:
    """Feed (seconds after T0, busy cores, behind) rounds through the stored status as the
    reconcile does: a driver's round (``start`` not pooled) places it first (local mode or
    executors, from ``desired``), then stamps auto's decision; the next round reads it back."""
    seen, placement = [], start
    for at, cores, late in rounds:
        now = T0 + timedelta(seconds=at)
        placed = placement
        if placement.mode != "pooled":
            placed = place(spec, placement, desired, "the count", now, driver_failures=failures)
        placement = _stored(placement, auto_placement(spec, placed, cores, late, now))
        seen.append(placement)
    return seen


IN_POOL = PlacementStatus(mode="pooled", since=T0, reason=AUTO_PLACEMENT, message="new",
                          wanted="pooled", decision="new")  # fmt: skip
LOCAL = {"minExecutors": 0, "maxExecutors": 4}
ON_DRIVER = PlacementStatus(mode="local", since=T0, reason=STARTED_LOCAL, message="local",
                            wanted="dedicated", decision="busy")  # fmt: skip


def test_a_busy_member_is_wanted_on_a_driver_of_its_own_after_the_window_saying_what_it_used() -> (
    None
):
    seen = _rounds(_spec(), IN_POOL, [(0, 0.6, False), (L / 2, 0.6, False), (L, 0.6, False)])
    assert [p.wanted for p in seen] == ["pooled", "pooled", "dedicated"]
    assert seen[1].pending_since == T0  # the clock runs
    assert seen[2].pending_since is None  # and is gone from the stored status once it moved
    assert "0.60 cores" in (seen[2].decision or "")
    assert (seen[2].mode, seen[2].reason) == ("pooled", AUTO_PLACEMENT)  # the move comes next
    # The keeper drops it from its pool; the reconcile routes it out.
    assert not wants_pool(_spec(), seen[2])


def test_a_burst_shorter_than_the_window_leaves_no_clock_behind_in_the_stored_status() -> None:
    # A clock that stopped must be gone from the stored status: left there, a later burst would
    # be taken as one "in a row" with the first and move the stream at once.
    seen = _rounds(_spec(), IN_POOL, [(0, 0.6, False), (L / 2, 0.01, False), (3 * L, 0.6, False),
                                      (3 * L + L / 2, 0.6, False)])  # fmt: skip
    later = T0 + timedelta(seconds=3 * L)
    assert [p.pending_since for p in seen] == [T0, None, later, later]
    assert [p.wanted for p in seen] == ["pooled"] * 4


def test_a_quiet_dedicated_stream_is_wanted_back_in_a_pool_only_after_its_window() -> None:
    spec = _spec(scaling=LOCAL)
    rounds = [(0, 0.02, False), (R / 2, 0.02, False), (R, 0.02, False)]
    seen = _rounds(spec, ON_DRIVER, rounds, desired=0)
    assert [p.wanted for p in seen] == ["dedicated", "dedicated", "pooled"]
    assert [wants_pool(spec, p) for p in seen] == [False, False, True]
    assert "0.02 cores" in (seen[2].decision or "")


def test_the_return_clock_survives_a_move_between_local_mode_and_executors() -> None:
    spec = _spec(scaling=LOCAL)
    seen = _rounds(spec, ON_DRIVER, [(0, 0.05, False)], desired=0)
    moved = _rounds(spec, seen[0], [(R / 2, 0.05, False)], desired=2)[0]
    assert moved.mode == "executors"
    assert moved.pending_since == T0  # the move kept auto's clock
    assert _rounds(spec, moved, [(R, 0.05, False)], desired=2)[0].wanted == "pooled"


def test_behind_its_target_in_a_pool_it_leaves_and_an_unmeasured_round_moves_no_clock() -> None:
    # Behind reads the p99 of a freshness window: it must last LEAVE_AFTER beyond that window.
    spec = _spec()
    window = window_seconds(spec.freshness.target_seconds)
    rounds = [(0, 0.05, True), (L / 2, None, True), (L, 0.05, True), (L + window, 0.05, True)]
    seen = _rounds(spec, IN_POOL, rounds)
    assert [p.wanted for p in seen] == ["pooled", "pooled", "pooled", "dedicated"]
    assert "lag" in (seen[3].decision or "")
    assert _rounds(spec, IN_POOL, [(0, None, False)])[0] == IN_POOL


def test_one_late_window_in_a_pool_is_no_move() -> None:
    """A slow moment (a pool's log checkpoints all at once) reads as behind for as long as its
    late batch stays in the freshness window: no move, whose own wait would cost minutes."""
    spec = _spec()
    window = window_seconds(spec.freshness.target_seconds)
    late = [(t, 0.05, True) for t in (0, window / 2, window)] + [(window + 30, 0.05, False)]
    seen = _rounds(spec, IN_POOL, [*late, (window + L + 60, 0.05, True)])
    assert {p.wanted for p in seen} == {"pooled"}
    # The clock started again at the second late spell.
    assert seen[-1].pending_since == T0 + timedelta(seconds=window + L + 60)
    # Busy is no slow moment: over MEMBER_MAX_CORES it leaves after LEAVE_AFTER alone.
    busy = _rounds(spec, IN_POOL, [(0, 0.5, False), (L, 0.5, False)])
    assert busy[-1].wanted == "dedicated"
    # A long target's window (three hours for one hour) holds a stream that is really behind
    # for at most BEHIND_WINDOW_CAP_SECONDS more.
    hourly = _spec(freshness={"targetSeconds": 3600})
    cap = BEHIND_WINDOW_CAP_SECONDS
    late = _rounds(
        hourly, IN_POOL, [(0, 0.05, True), (L + cap - 1, 0.05, True), (L + cap, 0.05, True)]
    )
    assert [p.wanted for p in late] == ["pooled", "pooled", "dedicated"]


def test_a_steady_stream_writes_no_status() -> None:
    # The status is patched only when it differs from the stored one.
    for start, spec in ((IN_POOL, _spec()), (ON_DRIVER, _spec(scaling=LOCAL))):
        first = _rounds(spec, start, [(0, 0.05, False)], desired=0)[0]
        assert _rounds(spec, first, [(60, 0.05, False)], desired=0)[0] == first


@pytest.mark.parametrize(
    ("case", "spec", "placement", "pooled"),
    [
        ("a new auto stream starts in a pool", {}, None, True),
        ("dedicated never", {"placement": "dedicated"}, IN_POOL, False),
        ("pooled always", {"placement": "pooled"}, ON_DRIVER, True),
        ("suspended: out of its pool", {"suspend": True}, IN_POOL, False),
        ("auto where the decision wants it", {}, ON_DRIVER, False),
        ("auto on a driver, no decision yet: its round decides first", {},
         ON_DRIVER.model_copy(update={"wanted": None}), False),
        ("auto, a spec a pool cannot run", {"sparkConf": {"spark.executor.memory": "4g"}},
         None, False),
        # A pool's pod carries volumes and Kafka credentials for the members that share them.
        ("auto with a volume and Kafka credentials", {"volumes": [{"name": "data",
         "mountPath": "/data", "claimName": "data"}], "source": {**_spec().source.model_dump(
         by_alias=True, exclude_none=True), "auth": {"securityProtocol": "SSL"}}}, None, True),
    ],
)  # fmt: skip
def test_which_streams_run_in_a_pool(
    case: str, spec: dict[str, Any], placement: PlacementStatus | None, pooled: bool
) -> None:
    assert wants_pool(_spec(**{"placement": "auto", **spec}), placement) is pooled


def test_a_stream_created_suspended_or_switched_to_auto_is_decided_afresh() -> None:
    # Created suspended, its first placement is a driver's: auto still starts it in a pool.
    suspended = _spec(suspend=True, scaling=LOCAL)
    first = _rounds(suspended, PlacementStatus(mode="local", since=T0), [(0, None, False)])[0]
    assert first.wanted == "pooled"
    assert wants_pool(_spec(scaling=LOCAL), first)  # once resumed
    # A busy dedicated stream switched to auto stays; a quiet one goes to a pool at once.
    undecided = ON_DRIVER.model_copy(update={"wanted": None, "decision": None})
    spec = _spec(scaling=LOCAL)
    assert _rounds(spec, undecided, [(0, 0.6, False)], desired=0)[0].wanted == "dedicated"
    assert _rounds(spec, undecided, [(0, 0.01, False)], desired=0)[0].wanted == "pooled"


def test_auto_with_a_spec_a_pool_cannot_run_stays_dedicated_naming_the_field_once() -> None:
    spec = _spec(sparkConf={"spark.executor.memory": "4g"}, scaling=LOCAL)
    first = _rounds(spec, ON_DRIVER, [(0, 0.0, False)], desired=0)[0]
    assert first.wanted == "dedicated"
    assert "spec.sparkConf" in (first.decision or "")
    assert "cannot share a pool" in (first.decision or "")
    assert _rounds(spec, first, [(R * 2, 0.0, False)], desired=0)[0] == first


def test_auto_keeps_the_hold_of_a_local_driver_that_kept_failing() -> None:
    # Its reason (LocalDriverFailed, held an hour) is place()'s, never auto's to overwrite.
    spec = _spec(sparkConf={"spark.executor.memory": "4g"}, scaling=LOCAL)
    failed = _rounds(spec, ON_DRIVER, [(0, None, False)], desired=0, failures=2)[0]
    assert (failed.mode, failed.reason) == ("executors", LOCAL_DRIVER_FAILED)
    later = _rounds(spec, failed, [(60, 0.0, False), (120, 0.0, False)], desired=0)
    assert [(p.mode, p.reason) for p in later] == [("executors", LOCAL_DRIVER_FAILED)] * 2


def test_leaving_auto_clears_its_decision_from_the_stored_status() -> None:
    decided = _rounds(_spec(), IN_POOL, [(0, 0.6, False)])[0]
    assert decided.pending_since is not None
    cleared = _rounds(_spec("pooled"), decided, [(1, 0.6, False)])[0]
    assert (cleared.wanted, cleared.pending_since, cleared.decision) == (None, None, None)


def test_a_stream_whose_own_driver_cannot_be_scheduled_goes_back_to_a_pool_and_stays() -> None:
    spec = _spec(scaling=LOCAL)
    back = auto_placement(spec, ON_DRIVER, None, True, T0, unplaceable=True)
    assert back.wanted == "pooled"
    assert back.decision == UNPLACEABLE
    # In the pool, behind or busy, it stays for the hold (a full node would bounce it back).
    pooled = back.model_copy(update={"mode": "pooled"})
    held = _rounds(spec, pooled, [(0, 0.6, True), (L, 0.6, True), (2 * L, 0.6, True)])
    assert [p.wanted for p in held] == ["pooled"] * 3
    # After the hold, its load decides again.
    later = UNPLACEABLE_HOLD_SECONDS
    free = _rounds(spec, held[-1], [(later, 0.6, True), (later + L, 0.6, True)])
    assert [p.wanted for p in free] == ["pooled", "dedicated"]


def _pool_report(p99s: dict[str, float | None]) -> PoolReport:
    members = {}
    for key, p99 in p99s.items():
        fresh = json.dumps({"windowSeconds": 180, "batches": 3, "records": 30,
                            "triggerSeconds": 46, "targetSeconds": 60,
                            **({} if p99 is None else {"p99Seconds": p99})})  # fmt: skip
        members[key] = f'{{"phase": "Running", "failures": 0, "freshness": {fresh}}}'
    text = (
        '{"at": 1, "revision": "1", "members": {'
        + ", ".join(f'"{k}": {v}' for k, v in members.items())
        + "}}"
    )
    report = parse_pool_report(text, "data", now=1.0)
    assert report is not None
    return report


@pytest.mark.parametrize(
    ("case", "others", "crowded"),
    [
        ("the others on target: the member itself is behind", [30.0, 40.0, 50.0], False),
        ("most of the others behind too: the pool is short", [70.0, 80.0, 50.0], True),
        ("half behind is no majority", [70.0, 50.0], False),
        ("unmeasured members do not count", [70.0, 80.0, None], True),
        ("one judged pool-mate is too few (a pool of two)", [70.0, None], False),
        ("alone in its pool", [], False),
    ],
)
def test_a_pool_falling_behind_as_a_whole_is_the_pools_trouble_not_its_members(
    case: str, others: list[float | None], crowded: bool
) -> None:
    report = _pool_report({"data/me": 90.0, **{f"data/o{i}": p for i, p in enumerate(others)}})
    assert pool_behind(report, "data/me") is crowded


@pytest.mark.parametrize(
    ("situation", "busy", "started_ago", "used"),
    [
        ("running for an hour: its reading", 0.008, 3600.0, 0.008),
        ("started 2 min ago (moved, or restarted): its start lifts the reading", 0.066, 120, None),
        ("just past the window", 0.009, READING_SETTLE_SECONDS, 0.009),
        ("no start told (an older pool's report)", 0.008, None, 0.008),
        ("nothing measured", None, 3600.0, None),
    ],
)
def test_packing_leaves_out_a_reading_its_members_own_start_lifts(
    situation: str, busy: float | None, started_ago: float | None, used: float | None
) -> None:
    """FL11: a trickle moved to even the pools read 0.066 busy cores after the move (0.008
    before), which asked for the next move."""
    started_at = None if started_ago is None else 10_000.0 - started_ago
    assert settled_reading(busy, started_at, 10_000.0) == used, situation


def _keeper_rounds(
    cores: dict[str, float], current: dict[str, str], rounds: int, wobble: float, seed: int
) -> tuple[dict[str, str], list[tuple[int, str]]]:
    """Pack round after round as the pool keeper does: readings wobbling by up to ``wobble``
    each round, and a member whose pool changed absent for a round (held until its old pool
    stopped it), placed anew the next. Returns the last placement and (round, key) per move."""
    limits = PoolLimits(members=20, cores=0.8)
    rng = random.Random(seed)
    moves: list[tuple[int, str]] = []
    for round_ in range(rounds):
        readings = [
            Member(k, "g", c * rng.uniform(1 - wobble, 1 + wobble)) for k, c in cores.items()
        ]
        packed = pack(readings, current, limits)
        moving = {k for k in packed if k in current and packed[k] != current[k]}
        moves += [(round_, k) for k in sorted(moving)]
        current = {k: p for k, p in packed.items() if k not in moving}
        assert all(list(packed.values()).count(p) <= limits.members for p in set(packed.values()))
    return current, moves


def test_a_balancing_move_lands_in_a_running_pool_not_in_a_gap() -> None:
    """Pool g-1 emptied (its members suspended); g-0 busy, g-2 idle: the members moved out of
    g-0 (held a round, then placed anew) go to g-2, and no third pool opens."""
    cores = {**{f"a{i}": 0.01 for i in range(6)}, **{f"i{i}": 0.002 for i in range(6)}}
    start = {**{f"a{i}": "g-0" for i in range(6)}, **{f"i{i}": "g-2" for i in range(6)}}
    current, moves = _keeper_rounds(cores, start, 50, 0.0, 1)
    assert moves, "the busy pool gives members to the idle one"
    assert set(current.values()) == {"g-0", "g-2"}, current


def test_a_fleet_placed_before_any_reading_is_evened_out_in_a_few_moves_and_then_left_alone() -> (
    None
):
    """FL9's pools as first packed: 40 streams at 10 records/s and 20 idle ones arrived
    together, unmeasured, and one pool got 20 busy members, another 5. Once measured (every
    reading, a five-minute average, wobbling by up to 20% each round), a handful of busy
    members trade places with idle ones within a few rounds, and then nobody moves."""
    busy = [f"trickle-{i}" for i in range(40)]
    idle = [f"idle-{i}" for i in range(20)]
    cores = {**dict.fromkeys(busy, 0.008), **dict.fromkeys(idle, 0.0005)}  # as FL10 measured
    start = {
        **dict.fromkeys(busy[:15] + idle[:5], "g-0"),
        **dict.fromkeys(busy[15:20] + idle[5:], "g-1"),
        **dict.fromkeys(busy[20:], "g-2"),
    }
    current, moves = _keeper_rounds(cores, start, 500, 0.2, 7)  # a round every 5 s: 40 minutes
    busy_moved = [k for _, k in moves if k in busy]
    # From 15/5/20 busy members to even takes 7 of them at least; each traded for an idle one.
    assert 7 <= len(busy_moved) <= 9, moves
    assert len(moves) <= 2 * len(busy_moved), moves
    assert max(r for r, _ in moves) <= 20, moves  # all early: then a wobble moves nobody
    per_pool = {p: sum(1 for k in busy if current[k] == p) for p in ("g-0", "g-1", "g-2")}
    assert max(per_pool.values()) - min(per_pool.values()) <= 4, per_pool
    assert set(current.values()) == {"g-0", "g-1", "g-2"}


@pytest.mark.parametrize(
    ("count", "each"), [(7, 0.25), (10, 0.2), (13, 0.15), (40, 0.025), (40, 0.008), (5, 0.008)]
)
def test_busy_members_that_cannot_be_split_evenly_are_not_traded_back_and_forth(
    count: int, each: float
) -> None:
    """Seven members of 0.25 cores over three pools leave one pool a member ahead whatever
    moves: with readings wobbling by 10%, they settle and stay, and no fourth pool opens."""
    cores = {**{f"busy-{i}": each for i in range(count)}, **{f"idle-{i}": 0.002 for i in range(20)}}
    current, moves = _keeper_rounds(cores, {}, 300, 0.1, count)
    assert [m for m in moves if m[0] >= 20] == [], moves
    assert set(current.values()) <= {"g-0", "g-1", "g-2"}


def test_a_move_between_pools_says_why() -> None:
    """kubectl describe explains the last move: both pools, and why."""
    before = IN_POOL.model_copy(update={"pool": "deltaflow-pool-ab12-0"})
    evened = moved_between_pools(before, "deltaflow-pool-ab12-0", "deltaflow-pool-ab12-2", T0)
    assert (evened.reason, evened.since, evened.mode) == ("MovedBetweenPools", T0, "pooled")
    assert "from pool deltaflow-pool-ab12-0 to deltaflow-pool-ab12-2" in (evened.message or "")
    assert "busiest" in (evened.message or "")
    regrouped = moved_between_pools(before, "deltaflow-pool-ab12-0", "deltaflow-pool-cd34-0", T0)
    assert "image or object store changed" in (regrouped.message or "")
