"""The engine-side router: fallbacks, pushed assignments, hot reload and the starvation guard."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.bfio.decide import build_payload
from policies.bfio.params import BfioMode, BfioParams, WeightScheme
from policies.bfio.router import ActiveBatch, BfioRouter, WaitingBatch
from schemas.policy_docs.base import InputsDigest
from schemas.policy_docs.bfio import (
    ActiveRequestDoc,
    BfioAssignment,
    BfioPolicy,
    BfioState,
    RankDoc,
    SurvivalTableDoc,
    WaitingRequestDoc,
)
from services.testing.models import changed


def _policy(version: int = 1, valid_until: float = 100.0, **params: object) -> BfioPolicy:
    bfio_params = BfioParams(**params)  # type: ignore[arg-type]
    payload = build_payload(bfio_params, horizon_steps=bfio_params.horizon_steps)
    return BfioPolicy(
        scope="dp0",
        deployment="test",
        version=version,
        computed_at=0.0,
        valid_until=valid_until,
        inputs=InputsDigest(snapshot_id="s"),
        payload=payload,
        state=BfioState(horizon_steps=payload.horizon_steps),
    )


def _frozen() -> float:
    return 0.0


def _step(router: BfioRouter) -> tuple[WaitingBatch, ActiveBatch, np.ndarray]:
    waiting = [
        WaitingRequestDoc(request_id=f"r{i}", prompt_tokens=p, arrival_s=0.0) for i, p in enumerate([10, 30, 50])
    ]
    ranks = [
        RankDoc(free_slots=0, active=[ActiveRequestDoc(prompt_tokens=100, generated_tokens=0)]),
        RankDoc(free_slots=1, active=[ActiveRequestDoc(prompt_tokens=70, generated_tokens=0)]),
    ]
    return router.batches(waiting, ranks)


class TestBfioRouter:
    def test_without_a_bundle_it_falls_back_to_jsq_by_load(self) -> None:
        router = BfioRouter(clock=_frozen)
        waiting, active, free = _step(router)
        routing = router.route(waiting=waiting, active=active, free_slots=free, now_s=1.0, step_index=0)
        assert routing.mode is BfioMode.JSQ_LOAD
        assert routing.fallback_reason == "no_bundle"
        assert routing.assignments == (("r0", 1),)

    def test_expired_bundle_falls_back(self) -> None:
        router = BfioRouter(clock=_frozen, policy=_policy(valid_until=5.0))
        waiting, active, free = _step(router)
        routing = router.route(waiting=waiting, active=active, free_slots=free, now_s=6.0, step_index=0)
        assert routing.fallback_reason == "bundle_expired"

    def test_bfio_fills_the_light_rank_to_the_envelope(self) -> None:
        router = BfioRouter(clock=_frozen, policy=_policy(horizon_steps=0))
        waiting, active, free = _step(router)
        routing = router.route(waiting=waiting, active=active, free_slots=free, now_s=1.0, step_index=0)
        assert routing.mode is BfioMode.BFIO
        assert routing.assignments == (("r1", 1),)
        assert routing.objective_j_tokens == 0.0

    def test_solver_overrun_falls_back_for_the_rest_of_the_step(self) -> None:
        ticks = itertools.count()
        router = BfioRouter(clock=lambda: float(next(ticks)), policy=_policy())
        waiting, active, free = _step(router)
        routing = router.route(waiting=waiting, active=active, free_slots=free, now_s=1.0, step_index=0)
        assert routing.fallback_reason == "budget"
        assert len(routing.assignments) == 1

    def test_valid_pushed_assignment_is_used_and_stale_ones_are_rejected(self) -> None:
        router = BfioRouter(clock=_frozen, policy=_policy(version=3))
        waiting, active, free = _step(router)
        free = np.array([1, 1])
        pushed = {
            "r2": BfioAssignment(
                request_id="r2",
                rank=0,
                bundle_version=3,
                computed_at_step=0,
                valid_until_step=10,
                plan_objective_j_tokens=0.0,
            ),
            "r0": BfioAssignment(
                request_id="r0",
                rank=1,
                bundle_version=2,
                computed_at_step=0,
                valid_until_step=10,
                plan_objective_j_tokens=0.0,
            ),
        }
        routing = router.route(waiting=waiting, active=active, free_slots=free, now_s=1.0, step_index=5, pushed=pushed)
        assert routing.pushed_used == 1
        assert routing.pushed_rejected == 1
        assert ("r2", 0) in routing.assignments
        assert len(routing.assignments) == 2

    def test_pushed_assignment_past_its_step_or_onto_a_full_rank_is_not_used(self) -> None:
        router = BfioRouter(clock=_frozen, policy=_policy())
        waiting, active, free = _step(router)
        pushed = {
            "r0": BfioAssignment(
                request_id="r0", rank=0, computed_at_step=0, valid_until_step=10, plan_objective_j_tokens=0.0
            ),
            "r1": BfioAssignment(
                request_id="r1", rank=1, computed_at_step=0, valid_until_step=3, plan_objective_j_tokens=0.0
            ),
        }
        routing = router.route(waiting=waiting, active=active, free_slots=free, now_s=1.0, step_index=5, pushed=pushed)
        assert (routing.pushed_used, routing.pushed_rejected) == (0, 2)

    def test_reload_ignores_an_older_version(self) -> None:
        router = BfioRouter(clock=_frozen, policy=_policy(version=5, horizon_steps=8))
        router.reload(_policy(version=4, horizon_steps=0))
        assert router.policy is not None
        assert router.policy.version == 5

    def test_rank_outside_the_free_slot_vector_is_refused(self) -> None:
        router = BfioRouter(clock=_frozen, policy=_policy())
        waiting, active, _ = _step(router)
        with pytest.raises(ValueError, match=r"active\.rank"):
            router.route(waiting=waiting, active=active, free_slots=np.array([1]), now_s=0.0, step_index=0)


class TestStarvationGuard:
    """A long prompt among a stream of short ones: BF-IO alone never admits it; aging bounds its delay."""

    STEP_S = 0.01

    def _admission_delay_s(self, aging_deadline_s: float, steps: int) -> float | None:
        router = BfioRouter(clock=_frozen, policy=_policy(horizon_steps=0, aging_deadline_s=aging_deadline_s))
        waiting = [WaitingRequestDoc(request_id="long", prompt_tokens=50_000, arrival_s=0.0)]
        ranks = [
            RankDoc(free_slots=1, active=[ActiveRequestDoc(prompt_tokens=10_000, generated_tokens=0)]),
            RankDoc(free_slots=1, active=[ActiveRequestDoc(prompt_tokens=10_000, generated_tokens=0)]),
        ]
        for step in range(steps):
            now_s = step * self.STEP_S
            waiting += [
                WaitingRequestDoc(request_id=f"s{step}-{i}", prompt_tokens=100, arrival_s=now_s) for i in range(4)
            ]
            batch, active, free = router.batches(waiting, ranks)
            routing = router.route(waiting=batch, active=active, free_slots=free, now_s=now_s, step_index=step)
            admitted = {request_id for request_id, _ in routing.assignments}
            if "long" in admitted:
                return now_s
            waiting = [w for w in waiting if w.request_id not in admitted]
        return None

    def test_the_wait_counts_from_entering_the_candidate_window_not_from_arrival(self) -> None:
        """Requests that queued 10 s before the router first sees them are not overdue at once (counting
        from arrival would force FIFO admission whenever the queue is longer than the deadline); after
        0.6 s in the window, past the 0.5 s deadline, they are."""
        router = BfioRouter(clock=_frozen, policy=_policy(horizon_steps=0, aging_deadline_s=0.5))
        waiting = [WaitingRequestDoc(request_id=f"q{i}", prompt_tokens=100 * (i + 1), arrival_s=0.0) for i in range(6)]
        ranks = [RankDoc(free_slots=1, active=[]), RankDoc(free_slots=1, active=[])]
        batch, active, free = router.batches(waiting, ranks)
        first = router.route(waiting=batch, active=active, free_slots=free, now_s=10.0, step_index=0)
        assert first.forced == 0
        admitted = {request_id for request_id, _ in first.assignments}
        batch, active, free = router.batches([w for w in waiting if w.request_id not in admitted], ranks)
        second = router.route(waiting=batch, active=active, free_slots=free, now_s=10.6, step_index=1)
        assert second.forced == 2

    def test_without_aging_the_long_prompt_starves(self) -> None:
        assert self._admission_delay_s(aging_deadline_s=600.0, steps=150) is None

    def test_aging_admits_it_within_the_deadline_plus_one_step(self) -> None:
        delay_s = self._admission_delay_s(aging_deadline_s=0.5, steps=150)
        assert delay_s is not None
        assert 0.5 - 1e-9 <= delay_s <= 0.5 + self.STEP_S


class TestRouterProperties:
    @settings(max_examples=40)
    @given(
        st.lists(st.integers(1, 5000), min_size=0, max_size=12),
        st.lists(st.tuples(st.integers(0, 3), st.lists(st.integers(1, 5000), max_size=4)), min_size=1, max_size=4),
        st.lists(st.integers(0, 5), max_size=4),
    )
    def test_never_overfills_a_rank_or_assigns_a_request_twice(
        self, prompts: list[int], ranks: list[tuple[int, list[int]]], pushed_ranks: list[int]
    ) -> None:
        router = BfioRouter(clock=_frozen, policy=_policy(aging_deadline_s=1.0))
        waiting = [
            WaitingRequestDoc(request_id=f"r{i}", prompt_tokens=p, arrival_s=float(i % 3))
            for i, p in enumerate(prompts)
        ]
        rank_docs = [
            RankDoc(free_slots=free, active=[ActiveRequestDoc(prompt_tokens=p, generated_tokens=3) for p in active])
            for free, active in ranks
        ]
        pushed = {
            f"r{i}": BfioAssignment(
                request_id=f"r{i}", rank=g, computed_at_step=0, valid_until_step=1, plan_objective_j_tokens=0.0
            )
            for i, g in enumerate(pushed_ranks)
        }
        batch, active, free = router.batches(waiting, rank_docs)
        routing = router.route(waiting=batch, active=active, free_slots=free, now_s=2.5, step_index=1, pushed=pushed)
        ids = [request_id for request_id, _ in routing.assignments]
        assert len(ids) == len(set(ids)) == min(len(prompts), int(free.sum()))
        per_rank = np.bincount([g for _, g in routing.assignments], minlength=len(rank_docs))
        assert np.all(per_rank <= free)


class TestSurvivalClasses:
    @pytest.mark.parametrize(("default_class", "expected_j"), [("chat", 71.0), (None, 40.0)])
    def test_a_class_without_a_table_uses_the_default_class_table(
        self, default_class: str | None, expected_j: float
    ) -> None:
        """Chat table: S(0) = 1, S(n >= 1) = 0; H = 1, weights (1, 1); ranks hold classes x and y.

        With the chat table as default, rank 0's (100, age 0) request is gone at h = 1 and rank 1's (60, age 5)
        is past the table (predicted alive): J(w -> rank 1) = (2*105 - 205) + (2*66 - 66) = 71. Without a
        default, both actives are alive: J(w -> rank 1) = 5 + (2*101 - 167) = 40. The new chat request
        finishes after this step either way.
        """
        table = SurvivalTableDoc(
            traffic_class="chat", edges_tokens=[1.0], survival_frac=[0.0], n_samples=100, n_censored=0
        )
        params = BfioParams(weight_scheme=WeightScheme.UNIFORM)
        payload = build_payload(params, horizon_steps=1, tables=(table,), default_class=default_class)
        router = BfioRouter(clock=_frozen, policy=changed(_policy(), payload=payload))
        ranks = [
            RankDoc(free_slots=1, active=[ActiveRequestDoc(prompt_tokens=100, generated_tokens=0, traffic_class="x")]),
            RankDoc(free_slots=1, active=[ActiveRequestDoc(prompt_tokens=60, generated_tokens=5, traffic_class="y")]),
        ]
        waiting = [WaitingRequestDoc(request_id="w", prompt_tokens=40, arrival_s=0.0, traffic_class="chat")]
        batch, active, free = router.batches(waiting, ranks)
        routing = router.route(waiting=batch, active=active, free_slots=free, now_s=0.0, step_index=0)
        assert routing.assignments == (("w", 1),)
        assert routing.objective_j_tokens == expected_j


class TestLengthHints:
    """Hints reach the lookahead from the boundary documents and change the assignment the way Eq. 2 says."""

    def _step(self, router: BfioRouter, *, hinted: bool) -> tuple[WaitingBatch, ActiveBatch, np.ndarray]:
        """Rank 0 holds a 1000-token request that (by its hint) ends next step; rank 1 a 900-token one that lives.

        H = 0 puts the 1000-token arrival on rank 1 (max 1900 against 2000); knowing rank 0 empties after one
        step, lookahead puts it on rank 0 (after that step loads 1001 / 911 instead of 11 / 1901)."""
        waiting = [
            WaitingRequestDoc(request_id="big", prompt_tokens=1000, arrival_s=0.0),
            WaitingRequestDoc(request_id="small", prompt_tokens=10, arrival_s=0.0),
        ]
        ending = ActiveRequestDoc(prompt_tokens=1000, generated_tokens=4, output_tokens_hint=5 if hinted else None)
        living = ActiveRequestDoc(prompt_tokens=900, generated_tokens=4, output_tokens_hint=500 if hinted else None)
        ranks = [RankDoc(free_slots=1, active=[ending]), RankDoc(free_slots=1, active=[living])]
        return router.batches(waiting, ranks)

    def test_batches_carry_hints_as_nan_where_absent_and_none_without_any(self) -> None:
        router = BfioRouter(clock=_frozen)
        waiting, active, _ = self._step(router, hinted=True)
        assert waiting.output_tokens_hint is None
        assert active.output_tokens_hint is not None
        np.testing.assert_array_equal(active.output_tokens_hint, [5.0, 500.0])
        mixed, _, _ = router.batches(
            [
                WaitingRequestDoc(request_id="a", prompt_tokens=1, arrival_s=0.0, output_tokens_hint=7),
                WaitingRequestDoc(request_id="b", prompt_tokens=1, arrival_s=0.0),
            ],
            [RankDoc(free_slots=2)],
        )
        assert mixed.output_tokens_hint is not None
        np.testing.assert_array_equal(mixed.output_tokens_hint, [7.0, np.nan])

    @pytest.mark.parametrize(("hinted", "big_rank"), [(False, 1), (True, 0)])
    def test_a_hinted_finish_moves_the_large_arrival_onto_the_emptying_rank(self, hinted: bool, big_rank: int) -> None:
        """Without a survival table and without hints every active request is predicted alive, so H = 4
        decides as H = 0 would; with the hints it sees rank 0 empty from the next step."""
        router = BfioRouter(clock=_frozen, policy=_policy(horizon_steps=4))
        waiting, active, free = self._step(router, hinted=hinted)
        routing = router.route(waiting=waiting, active=active, free_slots=free, now_s=1.0, step_index=0)
        assert dict(routing.assignments) == {"big": big_rank, "small": 1 - big_rank}
