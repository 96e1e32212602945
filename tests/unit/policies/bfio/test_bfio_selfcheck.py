"""BF-IO's online self-check: the realised-imbalance judge and the hysteresis on the horizon."""

from __future__ import annotations

import numpy as np
import pytest

from policies.bfio.decide import build_payload, decide
from policies.bfio.horizon import build_horizon_grid
from policies.bfio.inputs import BfioInputs, SurvivalTable
from policies.bfio.params import BfioParams, WeightScheme
from policies.bfio.router import ActiveBatch, BfioRouter, Routing, WaitingBatch
from policies.bfio.selfcheck import SelfCheckVerdict, SelfCheckWindow, choose_horizon, paired_z, realised_objective
from schemas.policy_docs.base import InputsDigest
from schemas.policy_docs.bfio import (
    ActiveRequestDoc,
    BfioPolicy,
    BfioState,
    RankDoc,
    SelfCheckDoc,
    SurvivalTableDoc,
    WaitingRequestDoc,
)

MARGIN = 0.05
Z = 2.0
MIN_STEPS = 100


class TestRealisedImbalance:
    def test_loads_follow_each_request_until_its_realised_finish(self) -> None:
        """Two ranks; rank 0 holds a 10-token context that finishes after 2 steps, rank 1 a 4-token one that
        runs on. Offsets 0..3, one token a step: loads (10, 4), (11, 5), (0, 6), (0, 7) -> imbalance
        6 + 6 + 6 + 7 = 25."""
        total = realised_objective(
            np.array([0, 1]),
            np.array([10.0, 4.0]),
            np.array([2.0, 100.0]),
            num_ranks=2,
            offsets_steps=np.arange(4.0),
            weights=np.ones(4),
        )
        assert total == pytest.approx(25.0)

    def test_the_lookaheads_grid_and_weights_weigh_the_offsets(self) -> None:
        """The same requests on the grid (0, 1, 3) with weights (1, 0.5, 0.25): 6 + 0.5 * 6 + 0.25 * 7."""
        total = realised_objective(
            np.array([0, 1]),
            np.array([10.0, 4.0]),
            np.array([2.0, 100.0]),
            num_ranks=2,
            offsets_steps=np.array([0.0, 1.0, 3.0]),
            weights=np.array([1.0, 0.5, 0.25]),
        )
        assert total == pytest.approx(6.0 + 3.0 + 1.75)

    def test_h0_is_eq_2_at_the_step(self) -> None:
        loads = realised_objective(
            np.array([0, 0, 1, 2]),
            np.array([5.0, 7.0, 3.0, 1.0]),
            np.ones(4),
            num_ranks=3,
            offsets_steps=np.zeros(1),
            weights=np.ones(1),
        )
        assert loads == pytest.approx(3 * 12.0 - 16.0)

    def test_the_assignment_that_pairs_short_with_long_wins_over_the_horizon(self) -> None:
        """Same requests, two assignments: stacking both long-running requests on one rank is balanced at
        h = 0 only if the short ones fill the other; once the short ones finish, it is the worse one."""
        context = np.array([100.0, 100.0, 100.0, 100.0])
        remaining = np.array([1.0, 1.0, 50.0, 50.0])
        grid = {"num_ranks": 2, "offsets_steps": np.arange(6.0), "weights": 0.86 ** np.arange(6.0)}
        stacked = realised_objective(np.array([0, 0, 1, 1]), context, remaining, **grid)
        paired = realised_objective(np.array([0, 1, 0, 1]), context, remaining, **grid)
        assert paired == pytest.approx(0.0)
        assert stacked > 0.0


def _window(myopic: float, lookahead: float, steps: int = 500, spread: float = 0.01) -> SelfCheckWindow:
    """Sums over ``steps`` judged steps whose paired differences have standard deviation ``spread``."""
    gap = lookahead - myopic
    return SelfCheckWindow(
        judged_steps=steps,
        myopic_imbalance_tokens=myopic,
        lookahead_imbalance_tokens=lookahead,
        squared_difference_tokens2=gap * gap / steps + (steps - 1) * spread * spread,
    )


def _choose(window: SelfCheckWindow | None, lookahead_in_force: bool) -> tuple[bool, SelfCheckVerdict]:
    return choose_horizon(
        window, lookahead_in_force=lookahead_in_force, margin_frac=MARGIN, z_threshold=Z, min_judged_steps=MIN_STEPS
    )


class TestChooseHorizon:
    def test_flips_to_h0_when_lookahead_loses_by_more_than_the_margin(self) -> None:
        assert _choose(_window(myopic=90.0, lookahead=100.0), True) == (False, SelfCheckVerdict.MYOPIC_WINS)

    def test_keeps_the_lookahead_while_it_wins(self) -> None:
        assert _choose(_window(myopic=130.0, lookahead=100.0), True) == (True, SelfCheckVerdict.WITHIN_MARGIN)

    def test_comes_back_to_the_lookahead_when_it_wins_by_the_margin(self) -> None:
        assert _choose(_window(myopic=100.0, lookahead=90.0), False) == (True, SelfCheckVerdict.LOOKAHEAD_WINS)

    def test_a_loss_inside_the_noise_of_the_paired_differences_keeps_the_lookahead(self) -> None:
        """10% lower in sum, but the per-step differences spread so wide that it is 1.3 standard errors."""
        noisy = _window(myopic=90.0, lookahead=100.0, steps=500, spread=10.0 / (1.3 * np.sqrt(500)))
        assert paired_z(noisy) == pytest.approx(1.3)
        assert _choose(noisy, True) == (True, SelfCheckVerdict.WITHIN_MARGIN)

    def test_paired_z_is_the_summed_difference_over_its_standard_error(self) -> None:
        differences = np.array([3.0, -1.0, 4.0, 1.0, 5.0])
        window = SelfCheckWindow(
            judged_steps=5,
            myopic_imbalance_tokens=100.0,
            lookahead_imbalance_tokens=100.0 + differences.sum(),
            squared_difference_tokens2=float((differences**2).sum()),
        )
        expected = differences.sum() / np.sqrt(5 * differences.var(ddof=1))
        assert paired_z(window) == pytest.approx(expected)

    def test_too_few_judged_steps_keep_the_side_in_force(self) -> None:
        few = _window(myopic=10.0, lookahead=100.0, steps=MIN_STEPS - 1)
        assert _choose(few, True) == (True, SelfCheckVerdict.TOO_FEW_STEPS)
        assert _choose(None, False) == (False, SelfCheckVerdict.TOO_FEW_STEPS)

    def test_no_flapping_inside_the_margin(self) -> None:
        """Windows that swing either way by less than the margin never move the horizon, from either side."""
        rng = np.random.default_rng(3)
        for start in (True, False):
            in_force = start
            for swing in rng.uniform(-0.9 * MARGIN, 0.9 * MARGIN, size=200):
                in_force, verdict = _choose(_window(myopic=100.0 * (1.0 + swing), lookahead=100.0), in_force)
                assert in_force is start
                assert verdict is SelfCheckVerdict.WITHIN_MARGIN

    def test_a_loss_then_a_win_moves_it_once_each_way(self) -> None:
        sequence = [(100.0, 100.0), (94.0, 100.0), (97.0, 100.0), (100.0, 97.0), (100.0, 94.0), (100.0, 97.0)]
        in_force, path = True, []
        for myopic, lookahead in sequence:
            in_force, _ = _choose(_window(myopic, lookahead), in_force)
            path.append(in_force)
        assert path == [True, False, False, False, True, True]


def _table() -> SurvivalTable:
    return SurvivalTable(
        traffic_class="chat",
        edges_tokens=(1.0, 64.0, 256.0),
        survival_frac=(0.9, 0.5, 0.1),
        n_samples=600,
        n_censored=100,
    )


def _policy(decision_payload: object, decision_state: object) -> BfioPolicy:
    return BfioPolicy.model_validate(
        {
            "scope": "dp0",
            "deployment": "test",
            "version": 1,
            "computed_at": 0.0,
            "valid_until": 30.0,
            "inputs": InputsDigest(snapshot_id="s").model_dump(),
            "payload": decision_payload,
            "state": decision_state,
        }
    )


class TestDecideWithSelfCheck:
    PARAMS = BfioParams(
        horizon_steps=20, self_check_margin_frac=MARGIN, self_check_z=Z, self_check_min_judged_steps=MIN_STEPS
    )

    def _inputs(self, window: SelfCheckWindow | None) -> BfioInputs:
        return BfioInputs(
            num_ranks=16, slots_per_rank=72, survival_tables=(_table(),), default_class="chat", self_check=window
        )

    def test_lookahead_ships_with_its_shadow_and_the_verdict_is_recorded(self) -> None:
        decision = decide(self._inputs(None), None, self.PARAMS, 0.0)
        check = decision.payload.self_check
        assert decision.payload.horizon_steps == 20
        assert check is not None
        assert check.horizon_steps == 20
        assert check.horizon_grid_steps == [0, 1, 2, 4, 8, 16, 20]
        assert decision.diagnostics["self_check"] == "too_few_steps"

    def test_a_losing_lookahead_is_replaced_by_h0_and_stays_shadowed(self) -> None:
        losing = _window(myopic=90.0, lookahead=100.0)
        first = decide(self._inputs(losing), None, self.PARAMS, 0.0)
        assert first.payload.horizon_steps == 0
        assert first.payload.horizon_grid_steps == [0]
        assert first.payload.self_check is not None
        assert first.payload.self_check.horizon_steps == 20
        assert first.state.self_check_myopic
        assert first.diagnostics["self_check"] == "myopic_wins"
        assert first.diagnostics["self_check_myopic_imbalance_tokens"] == 90.0
        previous = _policy(first.payload.model_dump(), first.state.model_dump())
        level = decide(self._inputs(_window(myopic=100.0, lookahead=98.0)), previous, self.PARAMS, 1.0)
        assert level.payload.horizon_steps == 0
        assert level.diagnostics["self_check"] == "within_margin"
        back = decide(self._inputs(_window(myopic=100.0, lookahead=90.0)), previous, self.PARAMS, 1.0)
        assert back.payload.horizon_steps == 20
        assert not back.state.self_check_myopic

    def test_the_default_h0_has_no_self_check(self) -> None:
        decision = decide(self._inputs(_window(myopic=100.0, lookahead=10.0)), None, BfioParams(), 0.0)
        assert decision.payload.horizon_steps == 0
        assert decision.payload.self_check is None
        assert decision.diagnostics["self_check"] is None

    def test_switched_off_the_lookahead_stays_whatever_the_window_says(self) -> None:
        params = BfioParams(horizon_steps=20, self_check=False)
        decision = decide(self._inputs(_window(myopic=10.0, lookahead=100.0)), None, params, 0.0)
        assert decision.payload.horizon_steps == 20
        assert decision.payload.self_check is None


def _lookahead_doc() -> SelfCheckDoc:
    grid = build_horizon_grid(20, dyadic=True, scheme=WeightScheme.DECAY, decay_gamma=0.86)
    return SelfCheckDoc(
        horizon_steps=20,
        horizon_grid_steps=[int(h) for h in grid.offsets_steps],
        horizon_weights=[float(w) for w in grid.weights],
        period_s=0.25,
    )


def _bundle(horizon_steps: int, *, self_check: bool, version: int = 1) -> BfioPolicy:
    params = BfioParams(horizon_steps=20)
    table = SurvivalTableDoc(
        traffic_class="chat",
        edges_tokens=[0.0, 2.0, 8.0, 32.0, 128.0],
        survival_frac=[1.0, 0.6, 0.35, 0.15, 0.0],
        n_samples=1000,
        n_censored=0,
    )
    payload = build_payload(
        params,
        horizon_steps=horizon_steps,
        tables=(table,),
        default_class="chat",
        self_check=_lookahead_doc() if self_check else None,
    )
    return BfioPolicy(
        scope="dp0",
        deployment="test",
        version=version,
        computed_at=0.0,
        valid_until=100.0,
        inputs=InputsDigest(snapshot_id="s"),
        payload=payload,
        state=BfioState(horizon_steps=20, self_check_myopic=horizon_steps == 0),
    )


def _instance(router: BfioRouter, seed: int) -> tuple[WaitingBatch, ActiveBatch, np.ndarray]:
    rng = np.random.default_rng(seed)
    waiting = [
        WaitingRequestDoc(request_id=f"r{i}", prompt_tokens=int(p), arrival_s=0.0, traffic_class="chat")
        for i, p in enumerate(rng.integers(10, 2000, size=24))
    ]
    ranks = [
        RankDoc(
            free_slots=int(rng.integers(0, 6)),
            active=[
                ActiveRequestDoc(
                    prompt_tokens=int(rng.integers(10, 2000)),
                    generated_tokens=int(rng.integers(0, 60)),
                    traffic_class="chat",
                )
                for _ in range(int(rng.integers(2, 8)))
            ],
        )
        for _ in range(6)
    ]
    return router.batches(waiting, ranks)


def _route(policy: BfioPolicy, seed: int) -> Routing:
    router = BfioRouter(clock=lambda: 0.0, policy=policy)
    waiting, active, free = _instance(router, seed)
    return router.route(waiting=waiting, active=active, free_slots=free, now_s=1.0, step_index=0)


class TestRouterShadow:
    @pytest.mark.parametrize("seed", range(8))
    def test_the_shadow_is_the_other_horizons_own_decision_and_the_applied_one_is_unchanged(self, seed: int) -> None:
        lookahead, myopic = _route(_bundle(20, self_check=False), seed), _route(_bundle(0, self_check=False), seed)
        checked = _route(_bundle(20, self_check=True), seed)
        assert checked.shadow_rank_of is not None
        assert np.array_equal(checked.rank_of, lookahead.rank_of)
        assert np.array_equal(checked.shadow_rank_of, myopic.rank_of)
        reversed_ = _route(_bundle(0, self_check=True), seed)
        assert reversed_.shadow_rank_of is not None
        assert np.array_equal(reversed_.rank_of, myopic.rank_of)
        assert np.array_equal(reversed_.shadow_rank_of, lookahead.rank_of)

    def test_the_instances_tell_the_two_horizons_apart(self) -> None:
        differ = [
            not np.array_equal(
                _route(_bundle(20, self_check=False), s).rank_of, _route(_bundle(0, self_check=False), s).rank_of
            )
            for s in range(8)
        ]
        assert any(differ)

    def test_without_a_self_check_there_is_no_shadow(self) -> None:
        assert _route(_bundle(20, self_check=False), 0).shadow_rank_of is None
