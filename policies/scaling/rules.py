"""The scaler's safety rules: from a FleetOpt pool size to the replica change to make now (DESIGN section 7a).

FleetOpt decides GPUs per pool; a pool is resized in replicas of ``gpus_per_replica`` GPUs (the
engine's tensor-parallel size). ``decide_pool`` turns the plan's GPU count into a desired replica
count and, from what the pool runs now and what the scaler did before, the one change to make at
event time ``now_s``:

- the desired count is ``ceil(n_gpus / gpus_per_replica)`` clamped to ``[min_replicas, max_replicas]``,
  or the operator's pin (clamped the same way), which the plan cannot move;
- no change moves more than ``max_step_replicas`` replicas, and changes are ``cooldown_s`` apart;
- a scale-down waits until the plan has wanted fewer replicas for ``scale_down_hold_s``, counted
  from the ``computed_at`` of the first plan that wanted it, and then goes to the largest count
  wanted while it waited: a plan that dips and comes back never shrinks the pool, and one that
  oscillates below the current size shrinks it once, to the top of its swing. Scale-ups are not
  held (an under-sized pool misses the SLO), only step-limited and cooled down.

The planner holds its own scale-downs first (policies/fleetopt/hysteresis.py, the plan's
``FleetoptPoolHold``); this hold is the actuator's second line, against a planner configured
without one and against plans that arrive in a burst after an outage. A pool outside its bounds
(an operator resized it by hand) is brought back without the hold, at the same step and cool-down.

Pure: no clock, no I/O. The shell passes event time in and keeps ``PoolMemory`` between calls.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import StrEnum

from schemas.errors import ConfigError


class ScaleReason(StrEnum):
    """Why ``decide_pool`` changed the pool or left it as it is."""

    AT_TARGET = "at_target"
    SCALE_UP = "scale_up"
    SCALE_DOWN = "scale_down"
    OUT_OF_BOUNDS = "out_of_bounds"
    COOLING_DOWN = "cooling_down"
    SCALE_DOWN_HELD = "scale_down_held"
    NO_PLAN = "no_plan"


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolLimits:
    """The operator's limits of one pool.

    Attributes:
        min_replicas: the fewest replicas the scaler leaves running (0 allows scale to zero).
        max_replicas: the most replicas it ever asks for.
        gpus_per_replica: GPUs one replica holds (its tensor-parallel size); the plan's GPUs are divided by it.
        max_step_replicas: the largest change, up or down, in one action.
        cooldown_s: event time between two actions on the pool, seconds.
        scale_down_hold_s: event time the plan must want fewer replicas before the pool shrinks, seconds.
        pinned_replicas: a size the operator fixed; the plan is ignored while it is set.
    """

    min_replicas: int = 0
    max_replicas: int
    gpus_per_replica: int = 1
    max_step_replicas: int = 1
    cooldown_s: float = 60.0
    scale_down_hold_s: float = 300.0
    pinned_replicas: int | None = None

    def __post_init__(self) -> None:
        """Refuse limits that cannot work together, naming the field and the value."""
        problems = []
        if self.min_replicas < 0:
            problems.append(f"min_replicas must be >= 0, got {self.min_replicas}")
        if self.max_replicas < max(1, self.min_replicas):
            problems.append(
                f"max_replicas ({self.max_replicas}) must be >= 1 and >= min_replicas ({self.min_replicas})"
            )
        if self.gpus_per_replica < 1:
            problems.append(f"gpus_per_replica must be >= 1, got {self.gpus_per_replica}")
        if self.max_step_replicas < 1:
            problems.append(f"max_step_replicas must be >= 1, got {self.max_step_replicas}")
        for name, value in (("cooldown_s", self.cooldown_s), ("scale_down_hold_s", self.scale_down_hold_s)):
            if not math.isfinite(value) or value < 0.0:
                problems.append(f"{name} must be a finite number of seconds >= 0, got {value}")
        if self.pinned_replicas is not None and self.pinned_replicas < 0:
            problems.append(f"pinned_replicas must be >= 0, got {self.pinned_replicas}")
        if problems:
            msg = "; ".join(problems)
            raise ConfigError(msg)


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanTarget:
    """What the plan in force asks of one pool.

    Attributes:
        n_gpus: the plan's GPUs for the pool.
        plan_version: the FleetOpt document's version.
        computed_at_s: the event time the plan was computed at, seconds.
    """

    n_gpus: int
    plan_version: int
    computed_at_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolMemory:
    """What the scaler knows of one pool between decisions.

    Attributes:
        replicas: the replicas the pool runs (observed from the connector, or the last count set).
        last_change_s: event time of the last action; None before the first.
        down_since_s: event time since which the plan has wanted fewer replicas; None when it does not.
        down_peak_replicas: the largest count wanted while that scale-down waited.
    """

    replicas: int
    last_change_s: float | None = None
    down_since_s: float | None = None
    down_peak_replicas: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolDecision:
    """One pool's decision: the count wanted, the change to make now (``to_replicas``) and why.

    ``changed`` is True when ``to_replicas`` differs from ``from_replicas``: the shell acts on those
    only. ``memory`` is what to pass to the next call. ``previous_change_s`` (the cool-down's start),
    ``down_since_s`` and ``down_peak_replicas`` (a scale-down's hold: since when the plan wanted fewer,
    and the most it wanted meanwhile) are the facts the decision was taken on, so that an action can be
    explained from its record alone.
    """

    desired_replicas: int | None
    from_replicas: int
    to_replicas: int
    reason: ScaleReason
    pinned: bool
    plan_version: int | None
    memory: PoolMemory
    previous_change_s: float | None = None
    down_since_s: float | None = None
    down_peak_replicas: int | None = None

    @property
    def changed(self) -> bool:
        """Whether this decision resizes the pool."""
        return self.to_replicas != self.from_replicas


def replicas_for_gpus(n_gpus: int, gpus_per_replica: int) -> int:
    """Replicas that hold ``n_gpus`` GPUs: rounded up, since a short pool misses its SLO."""
    return -(-n_gpus // gpus_per_replica)


def desired_replicas(limits: PoolLimits, target: PlanTarget | None) -> int | None:
    """The count the pool should run: the pin, else the plan's GPUs in replicas, within the bounds; None: no plan."""
    if limits.pinned_replicas is not None:
        wanted = limits.pinned_replicas
    elif target is not None:
        wanted = replicas_for_gpus(target.n_gpus, limits.gpus_per_replica)
    else:
        return None
    return min(limits.max_replicas, max(limits.min_replicas, wanted))


def decide_pool(limits: PoolLimits, memory: PoolMemory, target: PlanTarget | None, now_s: float) -> PoolDecision:
    """The change to make to one pool now, under the pool's limits.

    Args:
        limits: the pool's bounds, step, cool-down, hold and pin.
        memory: what the previous call returned (``replicas`` refreshed from the connector where it reports them).
        target: the plan's size for the pool; None when no valid plan is in force (the pool is left alone).
        now_s: event time of this decision, seconds.

    Returns:
        The decision; act on it only when ``changed``.
    """
    current = memory.replicas
    desired = desired_replicas(limits, target)
    pinned = limits.pinned_replicas is not None
    version = None if target is None else target.plan_version

    def hold(reason: ScaleReason, kept: PoolMemory) -> PoolDecision:
        return PoolDecision(
            desired_replicas=desired,
            from_replicas=current,
            to_replicas=current,
            reason=reason,
            pinned=pinned,
            plan_version=version,
            memory=kept,
            previous_change_s=memory.last_change_s,
            down_since_s=kept.down_since_s,
            down_peak_replicas=kept.down_peak_replicas if kept.down_since_s is not None else None,
        )

    def move(to: int, reason: ScaleReason, kept: PoolMemory, *, down: PoolMemory | None = None) -> PoolDecision:
        return PoolDecision(
            desired_replicas=desired,
            from_replicas=current,
            to_replicas=to,
            reason=reason,
            pinned=pinned,
            plan_version=version,
            memory=replace(kept, replicas=to, last_change_s=now_s),
            previous_change_s=memory.last_change_s,
            down_since_s=None if down is None else down.down_since_s,
            down_peak_replicas=None if down is None else down.down_peak_replicas,
        )

    if desired is None:
        return hold(ScaleReason.NO_PLAN, memory)
    settled = replace(memory, down_since_s=None, down_peak_replicas=0)
    if desired == current:
        return hold(ScaleReason.AT_TARGET, settled)
    out_of_bounds = not limits.min_replicas <= current <= limits.max_replicas
    cooling = memory.last_change_s is not None and now_s - memory.last_change_s < limits.cooldown_s
    if desired > current:
        if cooling:
            return hold(ScaleReason.COOLING_DOWN, settled)
        reason = ScaleReason.OUT_OF_BOUNDS if out_of_bounds else ScaleReason.SCALE_UP
        return move(min(desired, current + limits.max_step_replicas), reason, settled)
    pending = memory.down_since_s is not None
    wanted_since_s = now_s if target is None else min(now_s, target.computed_at_s)
    since_s = memory.down_since_s if memory.down_since_s is not None else wanted_since_s
    peak = max(memory.down_peak_replicas, desired) if pending else desired
    waiting = replace(memory, down_since_s=since_s, down_peak_replicas=peak)
    if not (out_of_bounds or pinned) and now_s - since_s < limits.scale_down_hold_s:
        return hold(ScaleReason.SCALE_DOWN_HELD, waiting)
    if cooling:
        return hold(ScaleReason.COOLING_DOWN, waiting)
    to = max(peak, current - limits.max_step_replicas)
    reason = ScaleReason.OUT_OF_BOUNDS if out_of_bounds else ScaleReason.SCALE_DOWN
    return move(to, reason, settled if to == peak else waiting, down=waiting)
