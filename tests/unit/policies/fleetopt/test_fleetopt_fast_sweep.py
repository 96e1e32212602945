"""The fast exact-mode sweep against a straightforward per-length computation of the same law.

The reference below tabulates every integer length, computes each request's service time with the
scalar formulas of ``calibration.py`` (Eqs. 3-4, the compressed prompt of Eq. 15) and sums slices
directly; it shares no code with the range sums of ``ExactCalibrator``. Plans must agree exactly on
every GPU count and on (B*, gamma*).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from estimators import FLEETOPT_BREAKPOINTS_TOKENS
from policies.fleetopt.calibration import PREFILL_QUANTILE_FRAC, PoolCalibration, prefill_s, slots_per_gpu, split_tokens
from policies.fleetopt.cdf import LengthCdf
from policies.fleetopt.compression import split_traffic
from policies.fleetopt.erlang import erlang_c, p99_wait_s
from policies.fleetopt.inputs import FleetoptInputs
from policies.fleetopt.params import FleetoptParams
from policies.fleetopt.sizing import PoolSizing, evaluate_pool, min_gpus
from policies.fleetopt.sweep import FleetPlan, b_short_candidates, plan_fleet

DATA = Path(__file__).resolve().parents[4] / "services" / "sim" / "data"
BREAKPOINTS = FLEETOPT_BREAKPOINTS_TOKENS  # the paper's 18 breakpoints (seed-002 section 3.3)


def _shipped(name: str) -> LengthCdf:
    raw = json.loads((DATA / f"fleetopt-{name}_cdf.json").read_text())
    points = raw["cdf"] if isinstance(raw, dict) else raw
    return LengthCdf(tokens=tuple(int(t) for t, _ in points), frac=tuple(float(f) for _, f in points))


def _random_cdf(seed: int) -> LengthCdf:
    masses = np.random.default_rng(seed).random(len(BREAKPOINTS)) ** 3
    frac = np.cumsum(masses) / masses.sum()
    frac[-1] = 1.0
    return LengthCdf(tokens=BREAKPOINTS, frac=tuple(float(f) for f in frac))


class _Reference:
    """Per-length tables of one CDF: weight, l_in, l_out of every integer length 1..top."""

    def __init__(self, cdf: LengthCdf, params: FleetoptParams, input_frac: float) -> None:
        self.params = params
        self.input_frac = input_frac
        self.top = cdf.max_tokens
        self.weights = np.zeros(self.top + 1)
        prev_t, prev_f = 0, 0.0
        for t, f in zip(cdf.tokens, cdf.frac, strict=True):
            self.weights[prev_t + 1 : t + 1] = (f - prev_f) / (t - prev_t)
            prev_t, prev_f = t, f
        self.cum = np.cumsum(self.weights)
        pairs = [split_tokens(max(1, n), input_frac) for n in range(self.top + 1)]
        self.l_in = np.array([p[0] for p in pairs], dtype=np.int64)
        self.l_out = np.array([p[1] for p in pairs], dtype=np.int64)

    def _service(self, l_in: npt.NDArray[np.int64], l_out: npt.NDArray[np.int64], n: int) -> npt.NDArray[np.float64]:
        p = self.params
        held = (l_in + l_out) / p.calib_ctx_tokens
        return np.asarray((np.ceil(l_in / p.chunk_tokens) + l_out) * (p.w_s + p.h_s_per_slot * held * n))

    def _quantile(self, target: float) -> int:
        return int(min(max(int(np.searchsorted(self.cum, target, side="left")), 1), self.top))

    def _calibration(
        self, parts: list[tuple[float, slice, npt.NDArray[np.int64]]], n: int, l99: int
    ) -> PoolCalibration | None:
        """Sum (scale, lengths, l_in) slices served at n slots; l_out is always the original one."""
        mass = s1 = s2 = pre = 0.0
        for scale, lengths, l_in in parts:
            w = scale * self.weights[lengths]
            service = self._service(l_in, self.l_out[lengths], n)
            mass += float(w.sum())
            s1 += float((w * service).sum())
            s2 += float((w * service * service).sum())
            pre += float((w * np.ceil(l_in / self.params.chunk_tokens)).sum()) * (
                self.params.w_s + self.params.h_s_per_slot
            )
        if mass <= 0.0:
            return None
        p = self.params
        e1, e2 = s1 / mass, s2 / mass
        overhead = prefill_s(split_tokens(l99, self.input_frac)[0], p) + (
            p.w_s + p.h_s_per_slot * (l99 / p.calib_ctx_tokens) * n
        )
        return PoolCalibration(
            n_slots=n,
            mean_service_s=e1,
            cv2=max(0.01, e2 / (e1 * e1) - 1.0),
            mu_gpu_per_s=n / e1,
            mean_prefill_s=pre / mass,
            ttft_overhead_s=overhead,
        )

    def short_pool(self, b: int, gb: int, p_c: float) -> PoolCalibration | None:
        native = slice(1, min(b, self.top) + 1)
        band = slice(b + 1, min(gb, self.top) + 1)
        compressed_in = np.maximum(1, b - self.l_out[band])
        native_mass = float(self.weights[native].sum())
        total = native_mass + p_c * float(self.weights[band].sum())
        target = PREFILL_QUANTILE_FRAC * total
        l99 = min(self._quantile(target) if target <= native_mass else b, b)
        n = slots_per_gpu(b, self.params)
        return self._calibration([(1.0, native, self.l_in[native]), (p_c, band, compressed_in)], n, l99)

    def long_pool(self, b: int, gb: int, p_c: float) -> PoolCalibration | None:
        band = slice(b + 1, min(gb, self.top) + 1)
        above = slice(gb + 1, self.top + 1)
        band_mass = (1.0 - p_c) * float(self.weights[band].sum())
        target = PREFILL_QUANTILE_FRAC * (float(self.weights[above].sum()) + band_mass)
        if target <= band_mass:
            l99 = self._quantile(float(self.cum[min(b, self.top)]) + target / (1.0 - p_c))
        else:
            l99 = self._quantile(float(self.cum[min(gb, self.top)]) + (target - band_mass))
        n = slots_per_gpu(self.params.long_ctx_tokens, self.params)
        return self._calibration([(1.0, above, self.l_in[above]), (1.0 - p_c, band, self.l_in[band])], n, l99)


def _size(rate: float, calib: PoolCalibration | None, params: FleetoptParams) -> PoolSizing:
    if calib is None or rate <= params.min_pool_rate_per_s:
        return evaluate_pool(0, rate, None, params)
    return evaluate_pool(min_gpus(rate, calib, params), rate, calib, params)


def _reference_plan(inputs: FleetoptInputs, params: FleetoptParams) -> tuple[list[tuple[int, int]], int, float, int]:
    """Every point's (n_s, n_l), then B*, gamma* and the total of the cheapest SLO-feasible fleet."""
    ref = _Reference(inputs.cdf, params, inputs.input_frac)
    rows: list[tuple[float, bool, int, float, int, int]] = []
    for b in b_short_candidates(inputs, params):
        for gamma in params.gammas:
            split = split_traffic(inputs.cdf, inputs.arrival_rate_per_s, b, gamma, inputs.p_c)
            gb = split.gamma_b_tokens
            short = _size(split.short_rate_per_s, ref.short_pool(b, gb, inputs.p_c), params)
            long_calib = (
                ref.long_pool(b, gb, inputs.p_c) if split.long_rate_per_s > params.min_pool_rate_per_s else None
            )
            long = _size(split.long_rate_per_s, long_calib, params)
            cost = short.n_gpus * params.short_cost_usd_per_hr + long.n_gpus * params.long_cost_usd_per_hr
            rows.append((cost, short.slo_met and long.slo_met, b, gamma, short.n_gpus, long.n_gpus))
    ctx = params.long_ctx_tokens
    homo = _size(inputs.arrival_rate_per_s, ref.short_pool(ctx, ctx, inputs.p_c), params)
    rows.append((homo.n_gpus * params.short_cost_usd_per_hr, homo.slo_met, ctx, 1.0, homo.n_gpus, 0))
    feasible = [r for r in rows if r[1]] or rows
    best = min(feasible, key=lambda r: r[0])
    return [(r[4], r[5]) for r in rows[:-1]], best[2], best[3], best[4] + best[5]


def _assert_same(plan: FleetPlan, reference: tuple[list[tuple[int, int]], int, float, int]) -> None:
    counts, b_star, gamma_star, total = reference
    assert [(p.short.n_gpus, p.long.n_gpus) for p in plan.points] == counts
    assert (plan.best.short_ctx_tokens, plan.best.split.gamma, plan.best.total_gpus) == (b_star, gamma_star, total)


SHIPPED = [("azure", 1.0), ("lmsys", 1.0), ("agent_heavy", 0.75)]


class TestFastSweepMatchesReference:
    @pytest.mark.parametrize(("name", "p_c"), SHIPPED, ids=[s[0] for s in SHIPPED])
    @pytest.mark.parametrize("lam", [1000.0, 20.0])
    def test_shipped_cdfs(self, name: str, p_c: float, lam: float) -> None:
        inputs = FleetoptInputs(arrival_rate_per_s=lam, cdf=_shipped(name), p_c=p_c)
        params = FleetoptParams()
        _assert_same(plan_fleet(inputs, params), _reference_plan(inputs, params))

    @pytest.mark.parametrize("seed", [1, 2, 3, 4])
    def test_random_cdfs(self, seed: int) -> None:
        inputs = FleetoptInputs(arrival_rate_per_s=300.0, cdf=_random_cdf(seed), p_c=0.6, input_frac=0.7)
        params = FleetoptParams(t_slo_s=0.3)
        _assert_same(plan_fleet(inputs, params), _reference_plan(inputs, params))

    def test_wide_bands_where_outputs_outgrow_the_boundary(self) -> None:
        """gamma up to 4 with a 50/50 split: compressed outputs reach B, so prompts are cut to one token."""
        inputs = FleetoptInputs(arrival_rate_per_s=50.0, cdf=_random_cdf(5), p_c=0.9, input_frac=0.5)
        params = FleetoptParams(gammas=(1.0, 1.7, 2.5, 4.0))
        _assert_same(plan_fleet(inputs, params), _reference_plan(inputs, params))


class TestRareWaitShortcut:
    @settings(max_examples=60)
    @given(c=st.integers(min_value=1, max_value=200_000), load_frac=st.floats(min_value=0.05, max_value=0.999))
    def test_p99_wait_agrees_with_the_full_erlang_c(self, c: int, load_frac: float) -> None:
        """p99_wait_s skips Erlang-C when it is provably below 1 %; it must return what the full formula gives."""
        lam, mu = load_frac * c, 1.0
        prob_wait = erlang_c(c, lam / mu)
        full = 0.0 if prob_wait <= 0.01 else math.log(prob_wait / 0.01) * 1.5 / (2.0 * (c * mu - lam))
        assert p99_wait_s(c, lam, mu, 0.5) == full
