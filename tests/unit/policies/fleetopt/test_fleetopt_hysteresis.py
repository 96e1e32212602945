"""Actuation hysteresis (spec seed-002 section 5.4): up at once, down after a dwell, no flapping."""

from __future__ import annotations

import itertools

import numpy as np

from policies.fleetopt.hysteresis import BoundaryHold, PoolHold, hold_boundary, hold_pool
from policies.fleetopt.params import FleetoptParams

PARAMS = FleetoptParams()


class TestHoldPool:
    def test_scales_up_at_once(self) -> None:
        assert hold_pool(120, PoolHold(n_gpus=100), PARAMS, 0.0).n_gpus == 120

    def test_ignores_a_drop_inside_the_deadband(self) -> None:
        held = hold_pool(99, PoolHold(n_gpus=100), PARAMS, 0.0)
        assert held == PoolHold(n_gpus=100)

    def test_scales_down_only_after_the_dwell_to_the_largest_pending_target(self) -> None:
        held: PoolHold | None = PoolHold(n_gpus=100)
        pushed = []
        for k, target in enumerate([90, 92, 90, 91, 90, 90, 90, 90, 90, 90, 90, 90, 90, 90, 90, 90, 90]):
            held = hold_pool(target, held, PARAMS, 60.0 * k)
            pushed.append(held.n_gpus)
        # Dwell 900 s at one run a minute: the first run at t >= 900 s after the first wish (run 15) scales down.
        assert pushed[:15] == [100] * 15
        assert pushed[15:] == [92, 92]

    def test_a_run_back_inside_the_deadband_cancels_a_pending_scale_down(self) -> None:
        held = hold_pool(90, PoolHold(n_gpus=100), PARAMS, 0.0)
        held = hold_pool(100, held, PARAMS, 60.0)
        assert held == PoolHold(n_gpus=100)

    def test_noisy_stationary_target_never_flaps(self) -> None:
        """Targets of 100 +/- 4 GPUs for 6 hours: sizes only rise, and only while the noise sets new highs."""
        rng = np.random.default_rng(7)
        held: PoolHold | None = None
        pushed = []
        for k in range(360):
            held = hold_pool(int(100 + rng.integers(-4, 5)), held, PARAMS, 60.0 * k)
            pushed.append(held.n_gpus)
        changes = [b - a for a, b in itertools.pairwise(pushed) if b != a]
        assert all(change > 0 for change in changes)
        assert len(changes) <= 4
        assert max(pushed) <= 104

    def test_step_change_gives_one_scale_up_at_once(self) -> None:
        held: PoolHold | None = None
        pushed = []
        for k in range(30):
            held = hold_pool(100 if k < 10 else 150, held, PARAMS, 60.0 * k)
            pushed.append(held.n_gpus)
        assert pushed == [100] * 10 + [150] * 20


class TestHoldBoundary:
    def test_keeps_the_boundary_until_the_dwell_has_passed(self) -> None:
        held = BoundaryHold(b_short_tokens=4096, since_s=0.0)
        assert hold_boundary(6144, held, PARAMS, PARAMS.b_short_dwell_s - 1.0) == held
        assert hold_boundary(6144, held, PARAMS, PARAMS.b_short_dwell_s) == BoundaryHold(
            b_short_tokens=6144, since_s=PARAMS.b_short_dwell_s
        )

    def test_takes_the_planned_boundary_on_the_first_decision(self) -> None:
        assert hold_boundary(4096, None, PARAMS, 5.0) == BoundaryHold(b_short_tokens=4096, since_s=5.0)
