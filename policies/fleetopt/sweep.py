"""Algorithm 1: the sweep over B_short candidates and gamma, and the homogeneous baseline.

Seed 002 section 6 (Algorithm 1) and section 7.1 (baselines); spec seed-002 sections 2.2-2.5.
For each (B, gamma) the traffic is split (Eqs. 1-2), both pools are calibrated (lines 7-8) and
sized (lines 9-10, Eq. 11) and the cost is Eq. 9. The plan is the cheapest SLO-feasible point;
ties go to the earlier point (smaller B, then smaller gamma), as the reference's stable sort does.

Deviation: points whose predicted P99 TTFT misses the SLO are dropped before the argmin (the
reference's ``sweep_analytical()[0]`` does not; spec section 2.5), and the homogeneous fleet is a
candidate too, so a plan never costs more than the baseline computed the same way. When no point
meets the SLO the cheapest point is returned with ``slo_met`` false.

Exact mode evaluates the whole sweep as numpy columns (``exact_sweep.py``), bit for bit what the
point-by-point evaluation gives, and builds the ``PlanPoint`` objects of ``FleetPlan.points`` only
when they are read: the best point and the baseline are all a decision needs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np

from policies.fleetopt.calibration import (
    EMPTY_POOL_CALIBRATION,
    PoolCalibration,
    calibrate_paper,
    slots_per_gpu,
)
from policies.fleetopt.compression import RoutingSplit, split_traffic
from policies.fleetopt.cost import fleet_cost_usd_per_hr
from policies.fleetopt.exact_sweep import SweepColumns, sweep_columns
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
    points: Sequence[PlanPoint]
    mode: PlannerMode

    def cheapest_at(self, b_tokens: int) -> PlanPoint | None:
        """The cheapest point at B_short = b_tokens as ``cheapest`` picks it; None when B was not swept."""
        if isinstance(self.points, PlanPoints):
            return self.points.cheapest_at(b_tokens)
        at_b = tuple(p for p in self.points if p.short_ctx_tokens == b_tokens)
        return cheapest(at_b) if at_b else None

    @property
    def savings_frac(self) -> float:
        """GPU savings of ``best`` against ``homogeneous`` (Table 3), >= 0 by construction."""
        homo = self.homogeneous.total_gpus
        return (homo - self.best.total_gpus) / homo


class PlanPoints(Sequence[PlanPoint]):
    """The points of an exact-mode sweep, made into ``PlanPoint`` objects from its columns on first read.

    Building ~140 points with their splits, calibrations and sizings costs about as much as the
    whole vectorised sweep, and a decision reads only the best point and the baseline.
    """

    __slots__ = ("_columns", "_count", "_params", "_points")

    def __init__(self, columns: SweepColumns, count: int, params: FleetoptParams) -> None:
        """The first ``count`` columns of ``columns`` are the points."""
        self._columns = columns
        self._count = count
        self._params = params
        self._points: tuple[PlanPoint, ...] | None = None

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> PlanPoint: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[PlanPoint, ...]: ...

    def __getitem__(self, index: int | slice) -> PlanPoint | tuple[PlanPoint, ...]:
        return self._all()[index]

    def __iter__(self) -> Iterator[PlanPoint]:
        return iter(self._all())

    def cheapest_at(self, b_tokens: int) -> PlanPoint | None:
        """``cheapest`` of the points with B_short = b_tokens, building only that one; None when B was not swept."""
        columns = self._columns
        at_b = np.flatnonzero(columns.b_short_tokens[: self._count] == b_tokens)
        if not at_b.size:
            return None
        feasible = at_b[columns.slo_met[at_b]]
        among = feasible if feasible.size else at_b
        best = int(among[np.argmin(columns.cost_usd_per_hr[among])])
        return _column_point(columns, best, self._params, homogeneous=False)

    def _all(self) -> tuple[PlanPoint, ...]:
        if self._points is None:
            self._points = _column_points(self._columns, self._params)[: self._count]
        return self._points


class _PaperCalibrations:
    """Paper-mode pool calibrations for one sweep: per B (short) and per gamma*B (long) as spec pitfall 16 asks.

    The Monte Carlo runs once per B and per gamma*B, the long pool's only where that pool is not dropped.
    """

    def __init__(self, inputs: FleetoptInputs, params: FleetoptParams) -> None:
        self._inputs = inputs
        self._params = params
        self._paper_short: dict[int, PoolCalibration | None] = {}
        self._paper_long: dict[int, PoolCalibration] = {}

    def pools(
        self, b_tokens: int, splits: tuple[RoutingSplit, ...]
    ) -> tuple[tuple[PoolCalibration | None, PoolCalibration | None], ...]:
        """(short, long) calibrations of each split of one B; long is None where that pool is dropped."""
        keep_long = [s.long_rate_per_s > self._params.min_pool_rate_per_s for s in splits]
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


def _paper_point(
    split: RoutingSplit, short_calib: PoolCalibration | None, long_calib: PoolCalibration | None, params: FleetoptParams
) -> PlanPoint:
    b = split.b_short_tokens
    # The short pool is sized whatever its rate (reference); the long pool is dropped below the cut-off.
    short = _size(split.short_rate_per_s, short_calib, params, droppable=False)
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


def _column_point(columns: SweepColumns, index: int, params: FleetoptParams, *, homogeneous: bool) -> PlanPoint:
    """Column ``index`` of an exact sweep as a ``PlanPoint``."""
    b = columns.b_short_tokens.item(index)
    split = RoutingSplit(
        b_short_tokens=b,
        gamma=columns.gamma.item(index),
        gamma_b_tokens=columns.gamma_b_tokens.item(index),
        alpha=columns.alpha.item(index),
        beta=columns.beta.item(index),
        alpha_prime=columns.alpha_prime.item(index),
        short_rate_per_s=columns.short_rate_per_s.item(index),
        long_rate_per_s=columns.long_rate_per_s.item(index),
    )
    short_calib, long_calib = columns.short_calib, columns.long_calib
    return PlanPoint(
        split=split,
        short_ctx_tokens=b,
        short_slots=short_calib.n_slots.item(index),
        long_ctx_tokens=params.long_ctx_tokens,
        long_slots=long_calib.n_slots.item(index),
        short_calib=short_calib.at(index) if short_calib.present[index] else None,
        long_calib=long_calib.at(index) if long_calib.present[index] else None,
        short=columns.short.at(index),
        long=columns.long.at(index),
        cost_usd_per_hr=columns.cost_usd_per_hr.item(index),
        slo_met=columns.slo_met.item(index),
        homogeneous=homogeneous,
    )


def _column_points(columns: SweepColumns, params: FleetoptParams) -> tuple[PlanPoint, ...]:
    """Every column of an exact sweep as a ``PlanPoint`` (none homogeneous), one list conversion per field."""
    splits = [
        RoutingSplit(
            b_short_tokens=b,
            gamma=g,
            gamma_b_tokens=gb,
            alpha=a,
            beta=be,
            alpha_prime=ap,
            short_rate_per_s=rs,
            long_rate_per_s=rl,
        )
        for b, g, gb, a, be, ap, rs, rl in zip(
            columns.b_short_tokens.tolist(),
            columns.gamma.tolist(),
            columns.gamma_b_tokens.tolist(),
            columns.alpha.tolist(),
            columns.beta.tolist(),
            columns.alpha_prime.tolist(),
            columns.short_rate_per_s.tolist(),
            columns.long_rate_per_s.tolist(),
            strict=True,
        )
    ]
    long_ctx = params.long_ctx_tokens
    return tuple(
        PlanPoint(
            split=split,
            short_ctx_tokens=split.b_short_tokens,
            short_slots=short_slots,
            long_ctx_tokens=long_ctx,
            long_slots=long_slots,
            short_calib=short_calib,
            long_calib=long_calib,
            short=short,
            long=long,
            cost_usd_per_hr=cost,
            slo_met=slo_met,
            homogeneous=False,
        )
        for split, short_slots, long_slots, short_calib, long_calib, short, long, cost, slo_met in zip(
            splits,
            columns.short_calib.n_slots.tolist(),
            columns.long_calib.n_slots.tolist(),
            columns.short_calib.all(),
            columns.long_calib.all(),
            columns.short.all(),
            columns.long.all(),
            columns.cost_usd_per_hr.tolist(),
            columns.slo_met.tolist(),
            strict=True,
        )
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
    if params.mode is PlannerMode.EXACT:
        return _column_point(sweep_columns(inputs, params, (), homogeneous=True), 0, params, homogeneous=True)
    return _paper_homogeneous(inputs, params, _PaperCalibrations(inputs, params))


def _homogeneous_split(inputs: FleetoptInputs, params: FleetoptParams) -> RoutingSplit:
    ctx = params.long_ctx_tokens
    return RoutingSplit(
        b_short_tokens=ctx,
        gamma=1.0,
        gamma_b_tokens=ctx,
        alpha=1.0,
        beta=0.0,
        alpha_prime=1.0,
        short_rate_per_s=inputs.arrival_rate_per_s,
        long_rate_per_s=0.0,
    )


def _paper_homogeneous(inputs: FleetoptInputs, params: FleetoptParams, cals: _PaperCalibrations) -> PlanPoint:
    ctx = params.long_ctx_tokens
    split = _homogeneous_split(inputs, params)
    ((short_calib, _),) = cals.pools(ctx, (split,))
    point = _paper_point(split, short_calib, None, params)
    return dataclasses.replace(point, long_ctx_tokens=ctx, homogeneous=True)


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
    bs = b_short_candidates(inputs, params) if b_short_tokens is None else b_short_tokens
    if params.mode is PlannerMode.EXACT:
        return _column_points(sweep_columns(inputs, params, bs, homogeneous=False), params)
    return _paper_sweep(inputs, params, _PaperCalibrations(inputs, params), bs)


def _paper_sweep(
    inputs: FleetoptInputs, params: FleetoptParams, cals: _PaperCalibrations, bs: tuple[int, ...]
) -> tuple[PlanPoint, ...]:
    points: list[PlanPoint] = []
    for b in bs:
        splits = tuple(split_traffic(inputs.cdf, inputs.arrival_rate_per_s, b, g, inputs.p_c) for g in params.gammas)
        for split, (short_calib, long_calib) in zip(splits, cals.pools(b, splits), strict=True):
            points.append(_paper_point(split, short_calib, long_calib, params))
    return tuple(points)


def cheapest(points: Sequence[PlanPoint]) -> PlanPoint:
    """The cheapest SLO-feasible point, first one on ties; the cheapest overall when none is feasible.

    Raises:
        InvalidInputError: on an empty sequence.
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
    bs = b_short_candidates(inputs, params) if b_short_tokens is None else b_short_tokens
    if params.mode is PlannerMode.EXACT:
        columns = sweep_columns(inputs, params, bs, homogeneous=True)
        count = columns.size - 1
        homo = _column_point(columns, count, params, homogeneous=True)
        best_index = columns.cheapest()
        best = homo if best_index == count else _column_point(columns, best_index, params, homogeneous=False)
        return FleetPlan(best=best, homogeneous=homo, points=PlanPoints(columns, count, params), mode=params.mode)
    cals = _PaperCalibrations(inputs, params)
    points = _paper_sweep(inputs, params, cals, bs)
    homo = _paper_homogeneous(inputs, params, cals)
    return FleetPlan(best=cheapest((*points, homo)), homogeneous=homo, points=points, mode=params.mode)
