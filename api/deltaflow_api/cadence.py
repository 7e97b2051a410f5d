"""The trigger's cadence from the freshness target (spec.freshness): pure, shared by the driver
(which runs the trigger) and the operator's autoscaler (which models the batches it makes).

A record that just missed a trigger waits one interval, then its batch: its age at the Delta
commit is at most ``interval + batch time``. So the interval is what the target leaves after
the batch (its measured steady time with room for the slower tail) and some headroom for clocks
and the commit. A longer target means fewer batches, and a batch's fixed cost (seconds of CPU
whatever it holds, bench/README) is most of a small stream's cost; a topic with nothing new
runs no batch at all (Spark's processing-time trigger skips a batch without new offsets).

Why one batch per interval rather than Spark's ``minOffsetsPerTrigger``/``maxTriggerDelay``
(which start a batch early once enough records wait): the early batch only makes a fast stream
fresher than asked, at the price of more batches, while the writer already bounds each file
(about 100k records per write task) and ``source.maxOffsetsPerTrigger`` bounds a batch.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

# Before a batch was measured: a small batch on a warm driver takes 2-4 s on this project's
# 2-core reference machine (bench/README), a first one after start longer.
DEFAULT_BATCH_SECONDS = 5.0
# One batch in delta.checkpointInterval (10 by default) may be slower: Delta replayed the table's
# state inside that commit (3-5 s on the reference machine for a small table) until StreamAppend
# moved the replay, with the checkpoint file, after the commit; another writer's or an older
# runtime's may still. That batch holds a tenth of the records, so a p99 target must fit it; it
# is measured apart, and this is its time until one was.
DEFAULT_CHECKPOINT_BATCH_SECONDS = DEFAULT_BATCH_SECONDS
# The measured steady batch time (a median) times this: the slower tail (a file listing, a GC,
# a checkpoint of the Delta log every few commits) must fit too.
BATCH_TAIL = 1.5
# The shortest interval planned: below it the trigger's own polling of Kafka is most of the cost.
MIN_INTERVAL_SECONDS = 1.0
# Fitting the batch that checkpoints the Delta log (one in ten) may cost at most this many times
# the batches the steady batch alone needs. Beyond it the plan gives up on that batch (it lands
# late; the status says so and names a target that holds): a slow checkpoint is most often a
# busy process, where more batches make every batch slower (measured: a pool's members planning
# 1 s intervals for checkpoint batches that had waited for each other, FL2 in bench/README.md).
CHECKPOINT_FIT_COST = 2.0
# Headroom for the producer's clock against the driver's and for the commit after the batch.
HEADROOM_SHARE = 0.1
MIN_HEADROOM_SECONDS = 1.0
# A running stream moves to a new interval only when it differs by more than this (relative)
# from the one it runs: a move restarts the query (a second or two), so noise must not cause one.
REPLAN_CHANGE = 0.25
# Spark's processing-time trigger fires at whole multiples of its interval since the epoch, so
# streams that plan the same interval start every batch at the same instant: a pool's members
# queue for its task threads (and a node's drivers for its cores) together, and the last waits
# for all the others, which its measured batch time then counts. Each stream runs its derived
# interval shortened by its own share of this (never longer: the plan's bound still holds), so
# intervals differ, streams drift through each other and batches start apart.
STAGGER_SHARE = 0.1
# Float noise in the arithmetic above (seconds): never the difference between two plans.
_EPSILON = 1e-9


@dataclass(frozen=True)
class TriggerPlan:
    """The interval between batch starts, and whether the target holds with it."""

    interval_seconds: float
    pinned: bool  # spec.trigger.interval set it
    batch_seconds: float  # the batch time planned for (the measured steady one, or the default)
    measured: bool  # batch_seconds was measured (not the default)
    reachable: bool  # interval + the batch's tail fit the target
    reason: str  # one sentence for the status and the log
    target_seconds: float = 0.0
    # The slowest recurring batch planned for: the log checkpoint's (measured, or the default).
    checkpoint_batch_seconds: float = DEFAULT_CHECKPOINT_BATCH_SECONDS
    # False: the plan gave up on fitting the log checkpoint's batch (CHECKPOINT_FIT_COST); it
    # is judged by the steady batch, so batch-time noise does not restart its query.
    fits_checkpoint: bool = True

    @property
    def worst_age_seconds(self) -> float:
        """A record's age at commit, at most, with a batch of the planned tail."""
        return self.interval_seconds + tail_seconds(
            self.batch_seconds, self.checkpoint_batch_seconds
        )


def tail_seconds(batch_seconds: float, checkpoint_batch_seconds: float) -> float:
    """The batch time a record must be able to wait for: the steady batch's slower tail, or the
    log checkpoint's batch when that is slower."""
    return max(BATCH_TAIL * batch_seconds, checkpoint_batch_seconds)


def headroom_seconds(target_seconds: float) -> float:
    """What the plan keeps free of the target."""
    return max(MIN_HEADROOM_SECONDS, HEADROOM_SHARE * target_seconds)


def _least_room(batch_seconds: float, checkpoint_batch_seconds: float | None) -> float:
    """What a target must leave after its headroom for a plan that holds: the shortest interval
    and the tail, and, for a measured checkpoint batch, an interval at least
    1 / CHECKPOINT_FIT_COST of the steady one."""
    checkpoint = (
        DEFAULT_CHECKPOINT_BATCH_SECONDS
        if checkpoint_batch_seconds is None
        else checkpoint_batch_seconds
    )
    tail = tail_seconds(batch_seconds, checkpoint)
    if checkpoint_batch_seconds is None:
        return MIN_INTERVAL_SECONDS + tail
    steady = BATCH_TAIL * batch_seconds
    # (room - tail) >= (room - steady) / cost  <=>  room >= (cost * tail - steady) / (cost - 1)
    fit = (CHECKPOINT_FIT_COST * tail - steady) / (CHECKPOINT_FIT_COST - 1)
    return max(MIN_INTERVAL_SECONDS + tail, fit)


def minimum_target_seconds(
    batch_seconds: float, checkpoint_batch_seconds: float | None = None
) -> int:
    """The smallest whole-second target whose plan holds at these batch times (the log
    checkpoint's: None before one was measured)."""
    need = _least_room(batch_seconds, checkpoint_batch_seconds)
    # target - max(1, 0.1 target) >= need
    return math.ceil(max(need + MIN_HEADROOM_SECONDS, need / (1 - HEADROOM_SHARE)) - _EPSILON)


def plan_trigger(
    target_seconds: float,
    batch_seconds: float | None,
    pinned_seconds: float | None = None,
    checkpoint_batch_seconds: float | None = None,
) -> TriggerPlan:
    """The trigger interval for a freshness target at a measured steady batch time (None
    before any batch) and log-checkpoint batch time (None before one), or the pinned one; and
    why."""
    measured = batch_seconds is not None
    batch = DEFAULT_BATCH_SECONDS if batch_seconds is None else max(batch_seconds, 0.0)
    checkpoint = (
        DEFAULT_CHECKPOINT_BATCH_SECONDS
        if checkpoint_batch_seconds is None
        else max(checkpoint_batch_seconds, 0.0)
    )
    of_batch = f"batches take {batch:.1f} s" + ("" if measured else " (not measured yet)")
    if checkpoint_batch_seconds is not None and checkpoint > BATCH_TAIL * batch:
        of_batch += f", {checkpoint:.1f} s when Delta checkpoints the log"
    room = target_seconds - headroom_seconds(target_seconds) - tail_seconds(batch, checkpoint)
    if pinned_seconds is not None:
        reachable = pinned_seconds <= room + _EPSILON
        reason = f"trigger.interval pins {_s(pinned_seconds)} s; {of_batch}"
        if not reachable:
            reason += (
                f": a {_s(target_seconds)} s target needs the interval under "
                f"{_s(max(room, 0.0))} s (or remove trigger.interval to derive it)"
            )
        return TriggerPlan(
            pinned_seconds, True, batch, measured, reachable, reason, target_seconds, checkpoint
        )
    steady_room = target_seconds - headroom_seconds(target_seconds) - BATCH_TAIL * batch
    # Only a measured checkpoint batch is given up on: the default is a guess, and a fast steady
    # batch would otherwise read its guess as too costly to fit.
    too_costly = (
        checkpoint_batch_seconds is not None and room < steady_room / CHECKPOINT_FIT_COST - _EPSILON
    )
    if too_costly and steady_room >= MIN_INTERVAL_SECONDS - _EPSILON:
        least = minimum_target_seconds(batch, checkpoint_batch_seconds)
        interval = _interval(steady_room)
        return TriggerPlan(
            interval,
            False,
            batch,
            measured,
            False,
            f"a batch every {_s(interval)} s at most: {of_batch}; the log checkpoint's batch "
            f"(one in delta.checkpointInterval) lands after the {_s(target_seconds)} s target: "
            f"fitting it would take over {CHECKPOINT_FIT_COST:g}x the batches; set "
            f"spec.freshness.targetSeconds to {least} or more",
            target_seconds,
            checkpoint,
            fits_checkpoint=False,
        )
    if room < MIN_INTERVAL_SECONDS - _EPSILON:
        least = minimum_target_seconds(batch, checkpoint_batch_seconds)
        return TriggerPlan(
            MIN_INTERVAL_SECONDS,
            False,
            batch,
            measured,
            False,
            f"{of_batch}: a {_s(target_seconds)} s target leaves no time to gather records; "
            f"set spec.freshness.targetSeconds to {least} or more, or make batches faster "
            "(more executors or cores)",
            target_seconds,
            checkpoint,
        )
    interval = _interval(room)
    return TriggerPlan(
        interval,
        False,
        batch,
        measured,
        True,
        f"a batch every {_s(interval)} s at most: {of_batch}, within a "
        f"{_s(target_seconds)} s target",
        target_seconds,
        checkpoint,
    )


def window_seconds(target_seconds: float) -> float:
    """The window a stream's freshness percentiles cover (the driver's status, the placement's
    reading of it): three targets (a few batches, so a catch-up leaves it soon after the stream
    caught up), at least a minute, at most a day."""
    return max(60.0, min(3.0 * target_seconds, 86_400.0))


def _interval(room: float) -> float:
    """The interval planned in ``room`` seconds: whole seconds, tenths below two."""
    room = max(room, MIN_INTERVAL_SECONDS)
    whole = math.floor(room + _EPSILON) if room >= 2 else math.floor(room * 10 + _EPSILON) / 10
    return float(whole)


def staggered_interval_ms(plan: TriggerPlan, stream_key: str) -> int:
    """The interval the query runs (milliseconds): a derived plan's, less this stream's stable
    offset of up to STAGGER_SHARE of it (``stream_key`` names the stream, e.g. its checkpoint);
    a pinned interval exactly as pinned."""
    planned = round(plan.interval_seconds * 1000)
    if plan.pinned:
        return planned
    spread = int(planned * STAGGER_SHARE)
    digest = hashlib.sha256(stream_key.encode()).digest()
    return planned - int.from_bytes(digest[:8], "big") % (spread + 1)


def needs_replan(running: TriggerPlan, fresh: TriggerPlan) -> bool:
    """Whether a running stream should move to ``fresh``'s interval (never a pinned one): at
    once when the running interval no longer fits the target at the batch time ``fresh`` was
    planned for, else only for a change of more than REPLAN_CHANGE (each move is a restart)."""
    if running.pinned or fresh.pinned:
        return False
    old, new = running.interval_seconds, fresh.interval_seconds
    # A plan that gave up on the checkpoint's batch never fits it: judged by the steady batch.
    if old > new + _EPSILON and not _fits(old, fresh, checkpoint=fresh.fits_checkpoint):
        return True
    return abs(new - old) > REPLAN_CHANGE * old


def judged(running: TriggerPlan, fresh: TriggerPlan) -> TriggerPlan:
    """The running interval judged at ``fresh``'s batch time (what the status shows while no
    move is due): the pinned plan is ``fresh`` itself; a derived one keeps its interval."""
    if running.pinned or running.interval_seconds == fresh.interval_seconds:
        return fresh
    fits = _fits(running.interval_seconds, fresh)
    reason = (
        f"a batch every {_s(running.interval_seconds)} s at most: batches take "
        f"{fresh.batch_seconds:.1f} s" + ("" if fresh.measured else " (not measured yet)")
    )
    if not fits:
        reason = fresh.reason
    return TriggerPlan(
        running.interval_seconds,
        False,
        fresh.batch_seconds,
        fresh.measured,
        fits,
        reason,
        fresh.target_seconds,
        fresh.checkpoint_batch_seconds,
        fits_checkpoint=fits or fresh.fits_checkpoint,
    )


def _fits(interval: float, plan: TriggerPlan, *, checkpoint: bool = True) -> bool:
    """Whether a record waiting ``interval`` and then a batch of ``plan``'s measured time still
    lands within its target (the headroom kept; the 1.5x tail is the plan's margin, not this
    test's, so that batch-time noise does not restart the query), the log checkpoint's batch
    too unless ``checkpoint`` is False."""
    target = plan.target_seconds
    slowest = max(plan.batch_seconds, plan.checkpoint_batch_seconds if checkpoint else 0.0)
    return interval + slowest + headroom_seconds(target) <= target + _EPSILON


def _s(seconds: float) -> str:
    return f"{seconds:g}" if seconds == int(seconds) else f"{seconds:.1f}"
