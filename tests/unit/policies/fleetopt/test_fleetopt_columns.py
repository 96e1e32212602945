"""The vectorised exact sweep against the point-by-point implementation it replaced, float for float.

``exact_reference.py`` keeps that implementation (one B at a time, scalar sizing per pool). Every
plan point, the baseline and the chosen plan must be equal field by field: no float may differ in
its last bit, on the shipped CDFs and on random ones, at loads where every pool is sized in the
fast path and at loads where the scalar Erlang-C search is needed.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from estimators import FLEETOPT_BREAKPOINTS_TOKENS
from policies.fleetopt import erlang, sizing
from policies.fleetopt.cdf import LengthCdf
from policies.fleetopt.inputs import FleetoptInputs
from policies.fleetopt.params import FleetoptParams, PlannerMode
from policies.fleetopt.sizing import size_pool
from policies.fleetopt.sweep import cheapest, homogeneous_fleet, plan_fleet, sweep
from tests.unit.policies.fleetopt.exact_reference import reference_homogeneous, reference_sweep

DATA = Path(__file__).resolve().parents[4] / "services" / "sim" / "data"
SHIPPED = [("azure", 1.0), ("lmsys", 1.0), ("agent_heavy", 0.75)]


def _shipped(name: str) -> LengthCdf:
    raw = json.loads((DATA / f"fleetopt-{name}_cdf.json").read_text())
    points = raw["cdf"] if isinstance(raw, dict) else raw
    return LengthCdf(tokens=tuple(int(t) for t, _ in points), frac=tuple(float(f) for _, f in points))


def _random_cdf(seed: int) -> LengthCdf:
    """Random masses on the paper's 18 breakpoints, some buckets empty."""
    rng = np.random.default_rng(seed)
    masses = rng.random(len(FLEETOPT_BREAKPOINTS_TOKENS)) ** 3 * (rng.random(len(FLEETOPT_BREAKPOINTS_TOKENS)) > 0.2)
    masses[0] += 1e-3
    frac = np.cumsum(masses) / masses.sum()
    frac[-1] = 1.0
    return LengthCdf(tokens=FLEETOPT_BREAKPOINTS_TOKENS, frac=tuple(float(f) for f in frac))


def _assert_same(inputs: FleetoptInputs, params: FleetoptParams) -> None:
    points = reference_sweep(inputs, params)
    homo = reference_homogeneous(inputs, params)
    plan = plan_fleet(inputs, params)
    assert tuple(plan.points) == points
    assert plan.homogeneous == homo
    assert plan.best == cheapest((*points, homo))
    assert sweep(inputs, params) == points
    for b in {p.short_ctx_tokens for p in points}:
        assert plan.cheapest_at(b) == cheapest(tuple(p for p in points if p.short_ctx_tokens == b))
    assert plan.cheapest_at(params.long_ctx_tokens) is None
    assert homogeneous_fleet(inputs, params) == homo


class TestVectorisedSweepEqualsPointByPoint:
    @pytest.mark.parametrize(("name", "p_c"), SHIPPED, ids=[s[0] for s in SHIPPED])
    @pytest.mark.parametrize("lam", [1000.0, 100.0, 3.0])
    def test_shipped_cdfs(self, name: str, p_c: float, lam: float) -> None:
        _assert_same(FleetoptInputs(arrival_rate_per_s=lam, cdf=_shipped(name), p_c=p_c), FleetoptParams())

    @pytest.mark.parametrize("seed", range(8))
    def test_random_cdfs_loads_and_input_shares(self, seed: int) -> None:
        rng = np.random.default_rng(100 + seed)
        inputs = FleetoptInputs(
            arrival_rate_per_s=float(10 ** rng.uniform(-1.0, 3.5)),
            cdf=_random_cdf(seed),
            p_c=float(rng.choice([0.0, rng.random(), 1.0])),
            input_frac=float(rng.uniform(0.5, 0.99)),
        )
        params = FleetoptParams(t_slo_s=float(rng.uniform(0.05, 1.0)), rho_max=float(rng.uniform(0.5, 0.95)))
        _assert_same(inputs, params)

    @pytest.mark.parametrize(("name", "p_c"), SHIPPED, ids=[s[0] for s in SHIPPED])
    @pytest.mark.parametrize("gamma", [1.56, 2.0])
    def test_a_one_gamma_grid(self, name: str, p_c: float, gamma: float) -> None:
        """With one gamma per B the point-by-point code summed each B's runs as one vector, in numpy's order."""
        inputs = FleetoptInputs(arrival_rate_per_s=9.0, cdf=_shipped(name), p_c=p_c, input_frac=0.55)
        _assert_same(inputs, FleetoptParams(gammas=(gamma,), t_slo_s=0.4))

    def test_wide_bands_where_outputs_outgrow_the_boundary(self) -> None:
        """gamma up to 4 with a 50/50 split: compressed outputs reach B, so prompts are cut to one token."""
        inputs = FleetoptInputs(arrival_rate_per_s=50.0, cdf=_random_cdf(5), p_c=0.9, input_frac=0.5)
        _assert_same(inputs, FleetoptParams(gammas=(1.0, 1.7, 2.5, 4.0)))

    @pytest.mark.parametrize(("name", "p_c"), SHIPPED, ids=[s[0] for s in SHIPPED])
    def test_pools_in_doubt_go_through_the_scalar_search(
        self, name: str, p_c: float, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """With a margin of 100 % every pool with a queue is in doubt, so the scalar ``size_pool`` sizes it."""
        monkeypatch.setattr(erlang, "ROUNDING_MARGIN_FRAC", 1.0)
        scalar_calls = []
        monkeypatch.setattr(sizing, "size_pool", lambda *a: scalar_calls.append(a) or size_pool(*a))
        _assert_same(FleetoptInputs(arrival_rate_per_s=30.0, cdf=_shipped(name), p_c=p_c), FleetoptParams())
        assert scalar_calls

    def test_explicit_b_candidates_with_a_boundary_past_the_cdf(self) -> None:
        cdf = LengthCdf(tokens=(512, 2048, 8192), frac=(0.5, 0.9, 1.0))
        inputs = FleetoptInputs(arrival_rate_per_s=200.0, cdf=cdf, p_c=0.5)
        _assert_same(inputs, FleetoptParams(b_short_candidates_tokens=(300, 512, 5000, 9000, 20000)))


def test_paper_mode_plans_answer_cheapest_at_from_their_points() -> None:
    params = FleetoptParams(mode=PlannerMode.PAPER, b_short_candidates_tokens=(2048, 4096))
    plan = plan_fleet(FleetoptInputs(arrival_rate_per_s=1000.0, cdf=_shipped("azure")), params)
    assert plan.cheapest_at(4096) == cheapest(tuple(p for p in plan.points if p.short_ctx_tokens == 4096))
    assert plan.cheapest_at(1024) is None
