"""The scaler's safety rules (policies/scaling/rules.py): bounds, step, cool-down, hold, pins, no flapping."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from policies.scaling import (
    PlanTarget,
    PoolDecision,
    PoolLimits,
    PoolMemory,
    ScaleReason,
    decide_pool,
    replicas_for_gpus,
)
from schemas.errors import ConfigError


@dataclass(frozen=True, slots=True, kw_only=True)
class Tick:
    """One call of the scaler: the plan's GPUs for the pool (None: no plan) at event time ``now_s``."""

    now_s: float
    n_gpus: int | None


def drive(limits: PoolLimits, replicas: int, ticks: list[Tick]) -> list[PoolDecision]:
    """Run ``decide_pool`` over ``ticks`` the way the service does: each plan computed at its tick."""
    memory = PoolMemory(replicas=replicas)
    decisions = []
    for version, tick in enumerate(ticks, start=1):
        target = None
        if tick.n_gpus is not None:
            target = PlanTarget(n_gpus=tick.n_gpus, plan_version=version, computed_at_s=tick.now_s)
        decision = decide_pool(limits, memory, target, tick.now_s)
        decisions.append(decision)
        memory = decision.memory
    return decisions


def actions(decisions: list[PoolDecision]) -> list[PoolDecision]:
    return [decision for decision in decisions if decision.changed]


limits_strategy = st.builds(
    lambda lo, span, tp, step, cool, hold: PoolLimits(
        min_replicas=lo,
        max_replicas=max(1, lo + span),
        gpus_per_replica=tp,
        max_step_replicas=step,
        cooldown_s=cool,
        scale_down_hold_s=hold,
    ),
    st.integers(0, 4),
    st.integers(0, 8),
    st.integers(1, 8),
    st.integers(1, 4),
    st.floats(0.0, 120.0),
    st.floats(0.0, 600.0),
)
ticks_strategy = st.lists(
    st.tuples(st.floats(0.0, 200.0), st.one_of(st.none(), st.integers(0, 100))), min_size=1, max_size=60
).map(
    lambda steps: [
        Tick(now_s=sum(gap for gap, _ in steps[: i + 1]), n_gpus=n_gpus) for i, (_, n_gpus) in enumerate(steps)
    ]
)


class TestReplicasForGpus:
    def test_rounds_up_to_whole_replicas(self) -> None:
        assert [replicas_for_gpus(n, 4) for n in (0, 1, 4, 5, 8, 9)] == [0, 1, 1, 2, 2, 3]


class TestPoolLimits:
    def test_refuses_limits_that_cannot_work_together_and_names_each(self) -> None:
        with pytest.raises(ConfigError, match=r"max_replicas \(2\) must be >= 1 and >= min_replicas \(3\)") as info:
            PoolLimits(min_replicas=3, max_replicas=2, max_step_replicas=0)
        assert "max_step_replicas must be >= 1, got 0" in str(info.value)

    def test_refuses_a_negative_hold(self) -> None:
        with pytest.raises(ConfigError, match="scale_down_hold_s"):
            PoolLimits(max_replicas=4, scale_down_hold_s=-1.0)


class TestDecidePool:
    def test_plan_gpus_become_replicas_of_the_tp_size(self) -> None:
        limits = PoolLimits(max_replicas=10, gpus_per_replica=2, max_step_replicas=10, cooldown_s=0.0)
        (decision,) = drive(limits, 1, [Tick(now_s=0.0, n_gpus=7)])
        assert (decision.desired_replicas, decision.to_replicas, decision.reason) == (4, 4, ScaleReason.SCALE_UP)

    def test_scale_up_is_step_limited_and_cooled_down(self) -> None:
        limits = PoolLimits(max_replicas=10, max_step_replicas=2, cooldown_s=30.0)
        ticks = [Tick(now_s=t, n_gpus=8) for t in (0.0, 10.0, 30.0, 60.0, 90.0)]
        decisions = drive(limits, 1, ticks)
        assert [d.to_replicas for d in decisions] == [3, 3, 5, 7, 8]
        assert decisions[1].reason == ScaleReason.COOLING_DOWN

    def test_scale_down_waits_for_the_hold_counted_from_the_first_plan_that_wanted_it(self) -> None:
        limits = PoolLimits(max_replicas=10, max_step_replicas=10, cooldown_s=0.0, scale_down_hold_s=100.0)
        ticks = [Tick(now_s=t, n_gpus=2) for t in (0.0, 50.0, 99.0, 100.0)]
        decisions = drive(limits, 6, ticks)
        assert [d.reason for d in decisions] == [ScaleReason.SCALE_DOWN_HELD] * 3 + [ScaleReason.SCALE_DOWN]
        assert decisions[-1].to_replicas == 2

    def test_a_plan_that_comes_back_up_cancels_the_pending_scale_down(self) -> None:
        limits = PoolLimits(max_replicas=10, max_step_replicas=10, cooldown_s=0.0, scale_down_hold_s=100.0)
        ticks = [Tick(now_s=0.0, n_gpus=2), Tick(now_s=60.0, n_gpus=6), Tick(now_s=120.0, n_gpus=2)]
        decisions = drive(limits, 6, ticks)
        assert actions(decisions) == []
        assert decisions[-1].memory.down_since_s == 120.0

    def test_scale_down_goes_to_the_largest_count_wanted_during_the_hold(self) -> None:
        limits = PoolLimits(max_replicas=10, max_step_replicas=10, cooldown_s=0.0, scale_down_hold_s=100.0)
        ticks = [Tick(now_s=0.0, n_gpus=2), Tick(now_s=50.0, n_gpus=5), Tick(now_s=100.0, n_gpus=3)]
        assert [d.to_replicas for d in actions(drive(limits, 8, ticks))] == [5]

    def test_a_pool_above_its_maximum_is_brought_back_without_the_hold(self) -> None:
        limits = PoolLimits(max_replicas=4, max_step_replicas=3, cooldown_s=0.0, scale_down_hold_s=1e6)
        decisions = drive(limits, 9, [Tick(now_s=0.0, n_gpus=100), Tick(now_s=1.0, n_gpus=100)])
        assert [(d.to_replicas, d.reason) for d in decisions] == [
            (6, ScaleReason.OUT_OF_BOUNDS),
            (4, ScaleReason.OUT_OF_BOUNDS),
        ]

    def test_without_a_plan_the_pool_is_left_alone(self) -> None:
        limits = PoolLimits(min_replicas=2, max_replicas=10)
        (decision,) = drive(limits, 5, [Tick(now_s=0.0, n_gpus=None)])
        assert (decision.changed, decision.reason, decision.desired_replicas) == (False, ScaleReason.NO_PLAN, None)

    @given(limits=limits_strategy, ticks=ticks_strategy, start=st.integers(0, 12))
    def test_never_leaves_the_bounds_nor_steps_further_than_the_limit(
        self, limits: PoolLimits, ticks: list[Tick], start: int
    ) -> None:
        """From inside the bounds every count set stays inside; every change is at most the step limit."""
        replicas = min(limits.max_replicas, max(limits.min_replicas, start))
        for decision in drive(limits, replicas, ticks):
            assert limits.min_replicas <= decision.to_replicas <= limits.max_replicas
            assert abs(decision.to_replicas - decision.from_replicas) <= limits.max_step_replicas

    @given(limits=limits_strategy, ticks=ticks_strategy, start=st.integers(0, 12))
    def test_changes_are_at_least_the_cool_down_apart(self, limits: PoolLimits, ticks: list[Tick], start: int) -> None:
        decisions = drive(limits, start, ticks)
        times = [tick.now_s for tick, decision in zip(ticks, decisions, strict=True) if decision.changed]
        assert all(later - earlier >= limits.cooldown_s for earlier, later in itertools.pairwise(times))

    @given(
        low=st.integers(0, 20),
        high=st.integers(1, 20),
        period_s=st.floats(1.0, 299.0),
        cycles=st.integers(2, 40),
        step=st.integers(1, 4),
    )
    def test_an_oscillating_plan_shorter_than_the_hold_never_shrinks_the_pool(
        self, low: int, high: int, period_s: float, cycles: int, step: int
    ) -> None:
        """A plan swinging between two sizes faster than the hold only grows the pool, once, to the top of the swing."""
        low, high = min(low, high), max(low, high)
        limits = PoolLimits(max_replicas=20, max_step_replicas=step, cooldown_s=0.0, scale_down_hold_s=300.0)
        ticks = [Tick(now_s=i * period_s, n_gpus=(low, high)[i % 2]) for i in range(2 * cycles)]
        moves = actions(drive(limits, low, ticks))
        assert all(d.to_replicas > d.from_replicas for d in moves)
        assert len(moves) <= -(-(high - low) // step)

    @given(
        swing=st.lists(st.integers(0, 7), min_size=2, max_size=20),
        start=st.integers(8, 12),
    )
    def test_a_plan_swinging_below_the_pool_shrinks_it_once(self, swing: list[int], start: int) -> None:
        """A swing below the pool that repeats within the hold shrinks it once, to the top of the swing."""
        limits = PoolLimits(max_replicas=12, max_step_replicas=12, cooldown_s=0.0, scale_down_hold_s=60.0 * len(swing))
        ticks = [Tick(now_s=60.0 * i, n_gpus=n) for i, n in enumerate(swing * 4)]
        moves = actions(drive(limits, start, ticks))
        assert [(d.from_replicas, d.to_replicas) for d in moves] == [(start, max(swing))]

    @given(ticks=ticks_strategy, pin=st.integers(0, 12))
    def test_a_pin_holds_against_any_plan(self, ticks: list[Tick], pin: int) -> None:
        """With a pin, the pool reaches the pin (within the bounds) and no plan moves it away."""
        limits = PoolLimits(min_replicas=1, max_replicas=8, max_step_replicas=100, cooldown_s=0.0, pinned_replicas=pin)
        decisions = drive(limits, 4, ticks)
        assert all(d.to_replicas == min(8, max(1, pin)) for d in decisions)
        assert all(d.pinned for d in decisions)
