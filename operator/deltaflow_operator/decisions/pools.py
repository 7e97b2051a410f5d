"""Which small streams share a pool driver, and which pool: pure, from measured work.

Two decisions, both explained and both stable:

- ``choose``: whether a stream runs in a pool or on a driver of its own. ``dedicated`` and
  ``pooled`` are the user's; ``auto`` follows the stream's measured CPU with hysteresis: it
  leaves the pool once it has used more than ``MEMBER_MAX_CORES`` for ``LEAVE_AFTER_SECONDS``
  (or missed its freshness target that long beyond its freshness window), and returns only once
  it has used less than ``RETURN_BELOW_CORES`` for ``RETURN_AFTER_SECONDS`` (a band and two
  clocks: it never flaps on a burst). A stream a pool cannot run (its own JVM settings, another
  object store: ``conflicts``) stays dedicated.
- ``pack``: which pool each pooled stream runs in. Members stay where they are while their pool
  holds them, with a tolerance (a move is a stop and a start: never for tidiness or a wobble);
  a pool outgrown lets its largest members go. The others go, largest first, into the least
  busy of the pools their group needs with room, else into a new one. Once measured, pools
  that ended up far apart (members placed before any reading) are evened out, a member (or a
  trade for an idle one) at a time until they are close. Pools never mix groups (namespace and
  object store: a pool holds its members' secrets).

``wants_pool`` and ``auto_placement`` carry ``choose`` through ``status.placement`` (its
``wanted`` and ``pendingSince``): the reconcile routes a stream by the first and stamps each
round's decision with the second; the pool keeper pools only streams the first says so of.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Literal

from deltaflow_api.cadence import window_seconds
from deltaflow_api.v1alpha1 import DeltaIngestionSpec, PlacementStatus, pool_refusals
from deltaflow_operator.decisions.placement import MOVED_BETWEEN_POOLS

Where = Literal["pooled", "dedicated"]
Requested = Literal["auto", "dedicated", "pooled"]

# A member using more than this many cores is no longer small: a pool of 0.75 cores holds a
# few such and dozens of trickles (10 records/s: ~0.005 cores).
MEMBER_MAX_CORES = 0.25
LEAVE_AFTER_SECONDS = 120.0
RETURN_BELOW_CORES = 0.1
# The most of a freshness window that being behind must outlast: a long target's window (three
# targets) would keep a stream that is really behind in its pool for hours, while against such
# a target a move's own wait (minutes) is small.
BEHIND_WINDOW_CAP_SECONDS = 600.0
RETURN_AFTER_SECONDS = 900.0
# What an unmeasured stream is taken to use until its first cost window (a new stream).
UNMEASURED_CORES = 0.02
# A stream whose own driver could not be scheduled goes back to a pool (running slowly beats not
# running) and stays there this long whatever it measures, so it does not bounce off a full node.
UNPLACEABLE = "its driver of its own could not be scheduled: back to a pool"
UNPLACEABLE_HOLD_SECONDS = 3600.0


@dataclass(frozen=True)
class Load:
    """What the operator knows of a stream this round."""

    requested: Requested  # spec.placement
    # Its Spark tasks' busy time per second over the last minutes (what its batches take of
    # a pool's task threads; the same measure in a pool and on a driver of its own, unlike
    # process CPU, most of which is a driver's fixed cost). None: not measured yet.
    cores: float | None
    behind: bool = False  # its lag is over its target (status.lag against the spec's target)
    # How long one late batch reads as behind (the freshness window its p99 covers): being
    # behind moves a stream only once it has lasted LEAVE_AFTER_SECONDS beyond it, so a slow
    # moment (a pool's log checkpoints, a GC) is no move, whose own wait costs minutes.
    behind_window_seconds: float = 0.0
    conflicts: tuple[str, ...] = ()  # why a pool cannot run it (runtime pool.pool_conflicts)
    unplaceable: bool = False  # its own driver cannot be scheduled (it runs nowhere)


@dataclass(frozen=True)
class Placement:
    """Where a stream runs, since when and why, and the clock of a move being considered."""

    where: Where
    since: float
    reason: str
    pending_since: float | None = None  # since when the load has asked for the other place


def choose(load: Load, previous: Placement | None, now: float) -> Placement:
    """This round's place for a stream; ``previous`` unchanged while nothing moves."""
    if load.conflicts:
        return _at("dedicated", previous, now, "cannot share a pool: " + "; ".join(load.conflicts))
    if load.requested != "auto":
        return _at(load.requested, previous, now, f"spec.placement is {load.requested}")
    if load.unplaceable and (previous is None or previous.where == "dedicated"):
        return Placement("pooled", now, UNPLACEABLE)
    if previous is None:  # a new stream starts small, in a pool, unless measured otherwise
        if load.behind or (load.cores is not None and load.cores > MEMBER_MAX_CORES):
            return Placement("dedicated", now, "measured too busy for a pool at its start")
        return Placement("pooled", now, "a new stream starts in a pool until it is measured")
    if load.cores is None and not load.behind:
        return previous  # nothing measured this round (a move's new driver): no clock moves
    # Behind its target, it wants out of a pool and not into one, whatever its cores (a new
    # driver catching up has no reading yet, and must not keep a return clock running).
    cores = 0.0 if load.cores is None else load.cores
    if previous.where == "pooled":
        held = previous.reason == UNPLACEABLE and now - previous.since < UNPLACEABLE_HOLD_SECONDS
        busy = cores > MEMBER_MAX_CORES
        wants_out = (busy or load.behind) and not held
        return _after(
            previous,
            now,
            wants_out,
            # One clock for both wants: a stream behind for a while that then reads busy (a
            # five-minute average already) leaves at the shorter threshold.
            seconds=LEAVE_AFTER_SECONDS
            + (0.0 if busy else min(load.behind_window_seconds, BEHIND_WINDOW_CAP_SECONDS)),
            to="dedicated",
            reason=f"it used {cores:.2f} cores (a pool member may use {MEMBER_MAX_CORES})"
            if cores > MEMBER_MAX_CORES
            else "its lag stayed over its target in the pool",
        )
    wants_in = cores < RETURN_BELOW_CORES and not load.behind
    return _after(
        previous,
        now,
        wants_in,
        seconds=RETURN_AFTER_SECONDS,
        to="pooled",
        reason=f"it used {cores:.2f} cores (under {RETURN_BELOW_CORES}) for "
        f"{RETURN_AFTER_SECONDS / 60:.0f} min",
    )


def _wanted(placement: PlacementStatus) -> Where:
    return placement.wanted or ("pooled" if placement.mode == "pooled" else "dedicated")


def _refusals(spec: DeltaIngestionSpec) -> tuple[str, ...]:
    return tuple(pool_refusals(spec.model_dump(by_alias=True, exclude_none=True)))


def wants_pool(spec: DeltaIngestionSpec, placement: PlacementStatus | None) -> bool:
    """Whether the stream should run in a pool now: the routing of its reconcile, and which
    streams the pool keeper packs (with ``placement.mode`` pooled: its driver is gone)."""
    if spec.suspend or spec.placement == "dedicated":
        return False
    if spec.placement == "pooled":
        return True
    if _refusals(spec):
        return False
    # A new stream starts in a pool (choose's rule); else where the last decision wants it (one
    # running on a driver with no decision yet stays there until its round decides).
    return placement is None or _wanted(placement) == "pooled"


def auto_placement(
    spec: DeltaIngestionSpec,
    placement: PlacementStatus,
    cores: float | None,
    behind: bool,
    now: datetime,
    *,
    unplaceable: bool = False,
) -> PlacementStatus:
    """``placement`` with this round's decision of spec.placement auto stamped on it
    (``wanted``, ``pendingSince``, ``decision``: why), from the cores its tasks kept busy (None:
    not measured this round) and whether it is behind its freshness target. Where it runs now
    (``mode``, ``reason``, ``message``) is not this function's: the move comes after. Other
    placements carry no decision."""
    if spec.placement != "auto":
        if placement.wanted is None and placement.pending_since is None and not placement.decision:
            return placement
        return placement.model_copy(
            update={"wanted": None, "pending_since": None, "decision": None}
        )
    # No decision yet (a new stream, or one just switched to auto): decided afresh from what is
    # measured now, as a new stream's start is.
    previous = (
        None
        if placement.wanted is None
        else Placement(
            placement.wanted,
            (placement.since or now).timestamp(),
            placement.decision or "",
            None if placement.pending_since is None else placement.pending_since.timestamp(),
        )
    )
    load = Load(
        "auto",
        cores,
        behind,
        behind_window_seconds=window_seconds(spec.freshness.target_seconds),
        conflicts=_refusals(spec),
        unplaceable=unplaceable,
    )
    decided = choose(load, previous, now.timestamp())
    return placement.model_copy(
        update={
            "wanted": decided.where,
            "pending_since": None
            if decided.pending_since is None
            else datetime.fromtimestamp(decided.pending_since, UTC),
            "decision": decided.reason,
        }
    )


def _at(where: Where, previous: Placement | None, now: float, reason: str) -> Placement:
    """At ``where`` for a reason that is no measure: any move the load was timing is void."""
    if previous is not None and previous.where == where:
        if previous.reason == reason and previous.pending_since is None:
            return previous
        return replace(previous, reason=reason, pending_since=None)
    return Placement(where, now, reason)


def _after(
    previous: Placement, now: float, wants: bool, *, seconds: float, to: Where, reason: str
) -> Placement:
    """Move to ``to`` once the load has wanted it for ``seconds`` in a row."""
    if not wants:
        return previous if previous.pending_since is None else replace(previous, pending_since=None)
    pending = previous.pending_since if previous.pending_since is not None else now
    if now - pending >= seconds:
        return Placement(to, now, reason)
    return (
        previous if previous.pending_since == pending else replace(previous, pending_since=pending)
    )


@dataclass(frozen=True)
class Member:
    """A pooled stream to place: its group (namespace and object store), measured CPU and the
    bytes it takes in its pool's ConfigMap (its document, key and owner reference)."""

    key: str  # namespace/name
    group: str
    cores: float | None
    size: int = 0


# What a pool's members may take of its ConfigMap: the API server refuses an object over 1 MiB
# (etcd's request limit), and the ConfigMap also holds the revision, the pool's Spark settings
# and its metadata. A member list that would pass it splits the pool instead.
MAX_MEMBERS_BYTES = 900 * 1024

# A member already in a pool stays while the pool's members use up to this much more than its
# cores: a reading that wobbles near the limit does not move anybody.
STAY_TOLERANCE = 1.2
# A group's pools are balanced when the busiest one's members use this much over the group's
# mean and at least BALANCE_MIN_GAP_CORES more than the least busy one's (see _balance). Both
# relative to what members measure: a stream at 10 records/s keeps 0.008 cores of task threads
# busy (FL10), so 20 of them in one pool read 0.16 cores, yet their pool missed its target
# where pools of 10 did not.
BALANCE_RATIO = 1.15
BALANCE_MIN_GAP_CORES = 0.02
# A member's busy cores average its last five minutes (the runtime's LOAD_WINDOW_SECONDS): its
# start (the query's set-up, its first batches) lifts the reading that long. FL11: a trickle
# moved to even the pools read 0.066 cores after the move (0.008 before), which asked for the
# next move. Packing keeps the reading from before a start until the window has passed it.
READING_SETTLE_SECONDS = 330.0
_EPSILON = 1e-9


@dataclass(frozen=True)
class PoolLimits:
    """A pool's size (chart values): members at most, the cores its members may use, and the
    bytes its members may take in its ConfigMap (an object the API server holds to 1 MiB)."""

    members: int
    cores: float
    size: int = MAX_MEMBERS_BYTES


def pool_group(pool: str) -> str:
    """The group a pool named ``<group>-<n>`` serves (its namespace, object store and image)."""
    return pool.rsplit("-", 1)[0]


def moved_between_pools(
    placement: PlacementStatus, before: str, after: str, now: datetime
) -> PlacementStatus:
    """status.placement of a member ``pack`` moved from pool ``before`` to ``after``."""
    if pool_group(before) != pool_group(after):
        why = "its image or object store changed, and a pool runs one of each"
    else:
        why = (
            "the operator spreads the pools' load by the task time each member measures (its "
            "old pool was the busiest, or full)"
        )
    return placement.model_copy(
        update={
            "since": now,
            "reason": MOVED_BETWEEN_POOLS,
            "message": f"moved from pool {before} to {after}: {why}",
        }
    )


def settled_reading(
    busy_cores: float | None, started_at: float | None, reported_at: float
) -> float | None:
    """A member's reading as packing may use it: None while its window still holds its start."""
    if busy_cores is None:
        return None
    if started_at is not None and reported_at - started_at < READING_SETTLE_SECONDS:
        return None
    return busy_cores


def pack(
    members: Sequence[Member], current: Mapping[str, str], limits: PoolLimits
) -> dict[str, str]:
    """Each member's pool by key. ``current``: the pools members run in now. Pools are named
    ``<group>-<n>``; a pool left with no member is gone from the result (the operator removes
    it)."""
    placed: dict[str, str] = {}
    by_group: dict[str, list[Member]] = defaultdict(list)
    for member in members:
        by_group[member.group].append(member)
    for group, group_members in sorted(by_group.items()):
        pools: dict[str, list[Member]] = defaultdict(list)
        waiting: list[Member] = []
        # Who stays: the smallest first, while their pool holds them (with a tolerance), so
        # that a pool outgrown moves its largest members, the likeliest to keep growing.
        for member in sorted(group_members, key=lambda m: (_cores(m), m.key)):
            pool = current.get(member.key)
            if pool is None or pool_group(pool) != group:
                waiting.append(member)
            elif _fits(pools[pool], member, limits, tolerance=STAY_TOLERANCE):
                pools[pool].append(member)
            else:
                waiting.append(member)
        # The rest, largest first, into the least busy pool with room among those the group
        # needs: spread, not filled one after the other, so that members not measured yet (a
        # fleet created at once) do not leave one pool with all the busy ones.
        needed = _pools_needed(group_members, limits)
        for member in sorted(waiting, key=lambda m: (-_cores(m), m.key)):
            pools[_least_busy_with_room(group, pools, member, limits, needed)].append(member)
        while _balance(pools, limits):
            pass  # each move narrows the spread of the group's pools: the moves end
        placed.update({m.key: pool for pool, inside in pools.items() for m in inside})
    return placed


def _pools_needed(members: Sequence[Member], limits: PoolLimits) -> int:
    total = sum(_cores(m) for m in members)
    by_cores = math.ceil(total / limits.cores - _EPSILON) if limits.cores > 0 else 1
    by_size = math.ceil(_size(members) / limits.size) if limits.size > 0 else 1
    return max(1, math.ceil(len(members) / limits.members), by_cores, by_size)


def _least_busy_with_room(
    group: str, pools: Mapping[str, list[Member]], member: Member, limits: PoolLimits, needed: int
) -> str:
    """The least busy of the group's pools that holds the member: those running, and empty ones
    only while fewer run than the group needs (a gap left by a pool that emptied is no
    candidate: a member moved out of the busiest pool, placed anew the next round, would open
    it); else the first empty one."""
    running = {int(name.rsplit("-", 1)[1]) for name, inside in pools.items() if inside}
    candidates = [f"{group}-{i}" for i in sorted(running)]
    index, spare = 0, needed - len(running)
    while spare > 0:
        if index not in running:
            candidates.append(f"{group}-{index}")
            spare -= 1
        index += 1
    fitting = [p for p in candidates if _fits(pools.get(p, []), member, limits)]
    if fitting:
        return min(fitting, key=lambda p: (_used(pools.get(p, []))[1], len(pools.get(p, []))))
    index = 0
    while pools.get(f"{group}-{index}"):
        index += 1
    return f"{group}-{index}"


def _balance(pools: dict[str, list[Member]], limits: PoolLimits) -> bool:
    """Move one measured member (or swap two) from the busiest of a group's pools to the least
    busy when the busiest is BALANCE_RATIO over the mean and BALANCE_MIN_GAP_CORES over the
    least busy: members placed before anything was measured (a fleet created
    at once) otherwise leave one pool with every busy stream (FL7, FL9: its members missed
    their target while the other pools idled). Whether it moved anybody.

    A move takes at most half the gap, so the busiest pool stays the busier of the two and
    the pools' spread shrinks every time (the moves end). A swap trades a member for one using
    at most half as much (an idle one for a busy one): two members whose readings differ by a
    wobble are never traded, and busy members that cannot be split evenly (seven over three
    pools) stay where they are. The move that brings the two closest to even is taken, a single
    move before a swap."""
    busy = {pool: _used(inside)[1] for pool, inside in pools.items() if inside}
    if len(busy) < 2:
        return False
    high = max(busy, key=lambda p: (busy[p], p))
    low = min(busy, key=lambda p: (busy[p], p))
    gap = busy[high] - busy[low]
    mean = sum(busy.values()) / len(busy)
    if gap < BALANCE_MIN_GAP_CORES or busy[high] <= BALANCE_RATIO * mean:
        return False
    room = len(pools[low]) < limits.members
    # Each option: (how far the two pools stay from even, whether it moves two, the keys).
    options: list[tuple[float, bool, str, str, Member, Member | None]] = []
    for mover in pools[high]:
        if mover.cores is None:
            continue  # moved on a reading, never on a guess
        partners: list[Member | None] = [None] if room else []
        partners += [m for m in pools[low] if m.cores is not None and m.cores <= mover.cores / 2]
        for partner in partners:
            shift = mover.cores - (0.0 if partner is None else _cores(partner))
            bytes_moved = mover.size - (0 if partner is None else partner.size)
            if (
                0 < shift <= gap / 2 + _EPSILON
                and busy[low] + shift <= limits.cores + _EPSILON
                and _size(pools[low]) + bytes_moved <= limits.size
                and _size(pools[high]) - bytes_moved <= limits.size
            ):
                key = "" if partner is None else partner.key
                closeness = round(gap / 2 - shift, 4)
                options.append((closeness, partner is not None, mover.key, key, mover, partner))
    if not options:
        return False
    *_, mover, partner = min(options, key=lambda o: o[:4])
    pools[high].remove(mover)
    pools[low].append(mover)
    if partner is not None:
        pools[low].remove(partner)
        pools[high].append(partner)
    return True


def _used(inside: Sequence[Member]) -> tuple[int, float]:
    return len(inside), sum(_cores(m) for m in inside)


def _cores(member: Member) -> float:
    return UNMEASURED_CORES if member.cores is None else member.cores


def _fits(
    inside: Sequence[Member], member: Member, limits: PoolLimits, tolerance: float = 1.0
) -> bool:
    count, total = _used(inside)
    # An empty pool takes any member (one larger than a pool's cores is choose's to move out).
    return count == 0 or (
        count < limits.members
        and total + _cores(member) <= limits.cores * tolerance + _EPSILON
        and _size(inside) + member.size <= limits.size
    )


def _size(inside: Sequence[Member]) -> int:
    return sum(m.size for m in inside)
