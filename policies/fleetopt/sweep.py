"""Algorithm 1: the sweep over B_short candidates and gamma, and the homogeneous baseline.

Seed 002 section 6 (Algorithm 1) and section 7.1 (baselines); spec seed-002 sections 2.2-2.5.
For each (B, gamma) the traffic is split (Eqs. 1-2), both pools are calibrated (lines 7-8) and
sized (lines 9-10, Eq. 11) and the cost is Eq. 9. The plan is the cheapest SLO-feasible point;
ties go to the earlier point (smaller B, then smaller gamma), as the reference's stable sort does.

Deviation: points whose predicted P99 TTFT misses the SLO are dropped before the argmin (the
reference's ``sweep_analytical()[0]`` does not; spec section 2.5), and the homogeneous fleet is a
candidate too, so a plan never costs more than the baseline computed the same way. When no point
meets the SLO the cheapest point is returned with ``slo_met`` false.
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.fleetopt.calibration import (
    EMPTY_POOL_CALIBRATION,
    ExactCalibrator,
    PoolCalibration,
    calibrate_paper,
    slots_per_gpu,
)
from policies.fleetopt.compression import RoutingSplit, split_traffic
from policies.fleetopt.cost import fleet_cost_usd_per_hr
from policies.fleetopt.inputs import FleetoptInputs
from policies.fleetopt.params import FleetoptParams, PlannerMode
from policies.fleetopt.sizing import PoolSizing, evaluate_pool, size_pool
from schemas.errors import InvalidInputError


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanPoint:
    """One evaluated (B_short, gamma) fleet.

    Attributes:
        split: the traffic split and per-pool arrival rates.
        short_ctx_tokens: C_max^(s) = B_short.
        short_slots: n_max^(s), KV slots per short-pool GPU.
        long_ctx_tokens: C_max^(l).
        long_slots: n_max^(l).
        short_calib: short-pool calibration, None when the pool is empty.
        long_calib: long-pool calibration, None when the pool is empty or absent.
        short: sized short pool (the whole fleet for the homogeneous baseline).
        long: sized long pool (0 GPUs when dropped or absent).
        cost_usd_per_hr: Eq. 9.
        slo_met: both pools meet T_slo.
        homogeneous: True for the single 64K-context pool baseline.
    """

    split: RoutingSplit
    short_ctx_tokens: int
    short_slots: int
    long_ctx_tokens: int
    long_slots: int
    short_calib: PoolCalibration | None
    long_calib: PoolCalibration | None
    short: PoolSizing
    long: PoolSizing
    cost_usd_per_hr: float
    slo_met: bool
    homogeneous: bool

    @property
    def total_gpus(self) -> int:
        """n_s + n_l."""
        return self.short.n_gpus + self.long.n_gpus


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetPlan:
    """The planner's answer: the chosen point, the baseline and every point it weighed."""

    best: PlanPoint
    homogeneous: PlanPoint
    points: tuple[PlanPoint, ...]
    mode: PlannerMode

    @property
    def savings_frac(self) -> float:
        """GPU savings of ``best`` against ``homogeneous`` (Table 3), >= 0 by construction."""
        homo = self.homogeneous.total_gpus
        return (homo - self.best.total_gpus) / homo


class _Calibrations:
    """Pool calibrations for one sweep: per B (short) and per gamma*B (long) as spec pitfall 16 asks.

    Exact mode calibrates all gammas of one B in one vectorised pass; paper mode caches its Monte
    Carlo per B and per gamma*B, and runs the long pool's only where that pool is not dropped.
    """

    def __init__(self, inputs: FleetoptInputs, params: FleetoptParams) -> None:
        self._inputs = inputs
        self._params = params
        self._exact = (
            ExactCalibrator(inputs.cdf, params, input_frac=inputs.input_frac)
            if params.mode is PlannerMode.EXACT
            else None
        )
        self._paper_short: dict[int, PoolCalibration | None] = {}
        self._paper_long: dict[int, PoolCalibration] = {}

    def pools(
        self, b_tokens: int, splits: tuple[RoutingSplit, ...]
    ) -> tuple[tuple[PoolCalibration | None, PoolCalibration | None], ...]:
        """(short, long) calibrations of each split of one B; long is None where that pool is dropped."""
        keep_long = [s.long_rate_per_s > self._params.min_pool_rate_per_s for s in splits]
        if self._exact is not None:
            both = self._exact.pools(b_tokens, tuple(s.gamma_b_tokens for s in splits), self._inputs.p_c)
            return tuple((short, long if keep else None) for (short, long), keep in zip(both, keep_long, strict=True))
        short = self._paper_short_pool(b_tokens)
        return tuple(
            (short, self._paper_long_pool(s.gamma_b_tokens) if keep else None)
            for s, keep in zip(splits, keep_long, strict=True)
        )

    def _paper_short_pool(self, b_tokens: int) -> PoolCalibration | None:
        if b_tokens not in self._paper_short:
            sliced = self._inputs.cdf.short_slice(b_tokens)
            self._paper_short[b_tokens] = (
                None
                if sliced is None
                else calibrate_paper(sliced, b_tokens, self._params, input_frac=self._inputs.input_frac)
            )
        return self._paper_short[b_tokens]

    def _paper_long_pool(self, gamma_b_tokens: int) -> PoolCalibration:
        if gamma_b_tokens not in self._paper_long:
            sliced = self._inputs.cdf.long_slice(gamma_b_tokens)
            self._paper_long[gamma_b_tokens] = (
                EMPTY_POOL_CALIBRATION
                if sliced is None
                else calibrate_paper(
                    sliced,
                    self._params.long_ctx_tokens,
                    self._params,
                    input_frac=self._inputs.input_frac,
                    lo_clamp_tokens=max(1, gamma_b_tokens),
                )
            )
        return self._paper_long[gamma_b_tokens]


def _size(rate_per_s: float, calib: PoolCalibration | None, params: FleetoptParams, *, droppable: bool) -> PoolSizing:
    if calib is None or (droppable and rate_per_s <= params.min_pool_rate_per_s):
        return evaluate_pool(0, rate_per_s, None, params)
    return size_pool(rate_per_s, calib, params)


def _point(
    split: RoutingSplit, short_calib: PoolCalibration | None, long_calib: PoolCalibration | None, params: FleetoptParams
) -> PlanPoint:
    b = split.b_short_tokens
    # Paper mode sizes the short pool whatever its rate (reference); exact mode drops a trickle as for the long pool.
    short = _size(split.short_rate_per_s, short_calib, params, droppable=params.mode is PlannerMode.EXACT)
    long = _size(split.long_rate_per_s, long_calib, params, droppable=True)
    return PlanPoint(
        split=split,
        short_ctx_tokens=b,
        short_slots=slots_per_gpu(b, params),
        long_ctx_tokens=params.long_ctx_tokens,
        long_slots=slots_per_gpu(params.long_ctx_tokens, params),
        short_calib=short_calib,
        long_calib=long_calib,
        short=short,
        long=long,
        cost_usd_per_hr=fleet_cost_usd_per_hr(short.n_gpus, long.n_gpus, params),
        slo_met=short.slo_met and long.slo_met,
        homogeneous=False,
    )


def _check(inputs: FleetoptInputs, params: FleetoptParams) -> None:
    if inputs.cdf.max_tokens > params.long_ctx_tokens:
        msg = f"cdf reaches {inputs.cdf.max_tokens} tokens, beyond long_ctx_tokens={params.long_ctx_tokens}"
        raise InvalidInputError(msg, field="cdf", value=inputs.cdf.max_tokens)


def b_short_candidates(inputs: FleetoptInputs, params: FleetoptParams) -> tuple[int, ...]:
    """B_short values Algorithm 1 sweeps: the configured ones, else the CDF breakpoints (spec section 2.4).

    Only B below the long pool's window and at most ``max_short_ctx_tokens`` qualify.
    """
    raw = params.b_short_candidates_tokens or inputs.cdf.breakpoint_candidates()
    cap = min(params.max_short_ctx_tokens, params.long_ctx_tokens - 1)
    return tuple(sorted({b for b in raw if b <= cap}))


def homogeneous_fleet(inputs: FleetoptInputs, params: FleetoptParams) -> PlanPoint:
    """The baseline: one pool sized for C_max^(l) serving every request (seed 002 section 7.1)."""
    _check(inputs, params)
    return _homogeneous(inputs, params, _Calibrations(inputs, params))


def _homogeneous(inputs: FleetoptInputs, params: FleetoptParams, cals: _Calibrations) -> PlanPoint:
    ctx = params.long_ctx_tokens
    split = RoutingSplit(
        b_short_tokens=ctx,
        gamma=1.0,
        gamma_b_tokens=ctx,
        alpha=1.0,
        beta=0.0,
        alpha_prime=1.0,
        short_rate_per_s=inputs.arrival_rate_per_s,
        long_rate_per_s=0.0,
    )
    ((short_calib, long_calib),) = cals.pools(ctx, (split,))
    point = _point(split, short_calib, long_calib, params)
    return PlanPoint(
        split=point.split,
        short_ctx_tokens=ctx,
        short_slots=point.short_slots,
        long_ctx_tokens=ctx,
        long_slots=point.long_slots,
        short_calib=point.short_calib,
        long_calib=None,
        short=point.short,
        long=point.long,
        cost_usd_per_hr=point.cost_usd_per_hr,
        slo_met=point.slo_met,
        homogeneous=True,
    )


def sweep(
    inputs: FleetoptInputs, params: FleetoptParams, *, b_short_tokens: tuple[int, ...] | None = None
) -> tuple[PlanPoint, ...]:
    """Every (B, gamma) point of Algorithm 1, B ascending then gamma in grid order.

    Args:
        inputs: the estimate snapshot.
        params: planner parameters.
        b_short_tokens: the B values to sweep; default ``b_short_candidates(inputs, params)``.

    Raises:
        InvalidInputError: when the CDF reaches past the long pool's context window.
    """
    _check(inputs, params)
    cals = _Calibrations(inputs, params)
    return _sweep(inputs, params, cals, b_short_tokens)


def _sweep(
    inputs: FleetoptInputs, params: FleetoptParams, cals: _Calibrations, b_short_tokens: tuple[int, ...] | None
) -> tuple[PlanPoint, ...]:
    bs = b_short_candidates(inputs, params) if b_short_tokens is None else b_short_tokens
    points: list[PlanPoint] = []
    for b in bs:
        splits = tuple(split_traffic(inputs.cdf, inputs.arrival_rate_per_s, b, g, inputs.p_c) for g in params.gammas)
        for split, (short_calib, long_calib) in zip(splits, cals.pools(b, splits), strict=True):
            points.append(_point(split, short_calib, long_calib, params))
    return tuple(points)


def cheapest(points: tuple[PlanPoint, ...]) -> PlanPoint:
    """The cheapest SLO-feasible point, first one on ties; the cheapest overall when none is feasible.

    Raises:
        InvalidInputError: on an empty tuple.
    """
    if not points:
        msg = "cheapest needs at least one plan point, got none"
        raise InvalidInputError(msg, field="points", value=0)
    feasible = [p for p in points if p.slo_met] or list(points)
    return min(feasible, key=lambda p: p.cost_usd_per_hr)


def plan_fleet(
    inputs: FleetoptInputs, params: FleetoptParams, *, b_short_tokens: tuple[int, ...] | None = None
) -> FleetPlan:
    """Run Algorithm 1 and return the cheapest fleet with the homogeneous baseline.

    Args:
        inputs: the estimate snapshot.
        params: planner parameters.
        b_short_tokens: restrict the B sweep (Table 3 fixes one B per workload); default all candidates.

    Raises:
        InvalidInputError: when the CDF reaches past the long pool's context window.
    """
    _check(inputs, params)
    cals = _Calibrations(inputs, params)
    points = _sweep(inputs, params, cals, b_short_tokens)
    homo = _homogeneous(inputs, params, cals)
    return FleetPlan(best=cheapest((*points, homo)), homogeneous=homo, points=points, mode=params.mode)
