"""The exact-mode sweep as it stood before it was vectorised over every (B, gamma): the slow reference.

``policies.fleetopt`` now calibrates and sizes all points of a sweep in a few numpy passes. This
module keeps the previous implementation, one B at a time with scalar sizing per pool, unchanged,
so tests can require the fast sweep to return the very same plan points, float for float.
"""

from __future__ import annotations

import bisect
import functools
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from policies.fleetopt.calibration import (
    PREFILL_QUANTILE_FRAC,
    PoolCalibration,
    prefill_s,
    slots_per_gpu,
    split_tokens,
)
from policies.fleetopt.cdf import LengthCdf
from policies.fleetopt.compression import RoutingSplit, split_traffic
from policies.fleetopt.cost import fleet_cost_usd_per_hr
from policies.fleetopt.inputs import FleetoptInputs
from policies.fleetopt.params import FleetoptParams
from policies.fleetopt.sizing import PoolSizing, evaluate_pool, size_pool
from policies.fleetopt.sweep import PlanPoint, b_short_candidates


@dataclass(frozen=True, slots=True, kw_only=True)
class _Moments:
    """Weighted sums over sets of requests, one per band top: mass, sum w S, sum w S^2, sum w prefill; shape (K,)."""

    mass: npt.NDArray[np.float64]
    s1: npt.NDArray[np.float64]
    s2: npt.NDArray[np.float64]
    pre: npt.NDArray[np.float64]

    def plus(self, other: _Moments, scale: float) -> _Moments:
        return _Moments(
            mass=self.mass + scale * other.mass,
            s1=self.s1 + scale * other.s1,
            s2=self.s2 + scale * other.s2,
            pre=self.pre + scale * other.pre,
        )


# Rows of the per-length sums. With m = ceil(l_in / C_chunk) + l_out, L = l_in + l_out and
# k = H / C_calib, a request's service time at n slots is S = W m + n k L m, so
# S^2 = W^2 m^2 + 2 n W k L m^2 + n^2 k^2 L^2 m^2: six sums that do not depend on n serve every pool.
_MASS, _M, _LM, _M2, _LM2, _L2M2, _CHUNKS, _OUT, _OUT2 = range(9)
_ROWS = 9


@dataclass(frozen=True, slots=True, kw_only=True)
class _LengthLaw:
    """Unweighted running sums of the per-length service terms, independent of the CDF.

    Attributes:
        running: shape (9, top + 1); column x holds the rows summed over L = 1..x (column 0 is 0).
        l_out: shape (top + 1,), l_out of each length (index 0 as for L = 1); non-decreasing.
    """

    running: npt.NDArray[np.float64]
    l_out: npt.NDArray[np.int64]


@functools.lru_cache(maxsize=8)
def _length_law(input_frac: float, chunk_tokens: int, top_tokens: int) -> _LengthLaw:
    """Tabulate the per-length terms for lengths 1..top_tokens (O(top_tokens), memoised).

    The terms depend only on the input share, C_chunk and the longest length, not on the CDF,
    so successive estimate snapshots with the same input share reuse one table.
    """
    lengths = np.arange(top_tokens + 1, dtype=np.int64)
    lengths[0] = 1
    l_in = np.maximum(1, np.floor(input_frac * lengths).astype(np.int64))
    l_out = np.maximum(1, lengths - l_in)
    total = (l_in + l_out).astype(np.float64)
    chunks = np.ceil(l_in / chunk_tokens)
    m = chunks + l_out
    out = l_out.astype(np.float64)
    rows = np.empty((_ROWS, top_tokens + 1), dtype=np.float64)
    rows[_MASS] = 1.0
    rows[_M] = m
    rows[_LM] = m * total
    rows[_M2] = m * m
    rows[_LM2] = rows[_LM] * m
    rows[_L2M2] = rows[_LM2] * total
    rows[_CHUNKS] = chunks
    rows[_OUT] = out
    rows[_OUT2] = out * out
    rows[:, 0] = 0.0
    running = np.cumsum(rows, axis=1)
    running.setflags(write=False)
    l_out.setflags(write=False)
    return _LengthLaw(running=running, l_out=l_out)


class _WeightedSums:
    """Range sums of the service terms under one CDF, in O(log buckets) per range.

    The CDF puts the same weight w_k on every integer length of bucket (t_{k-1}, t_k], so a sum
    over any range is whole buckets (accumulated once per CDF) plus w_k times a difference of the
    unweighted running sums of ``_LengthLaw`` at the range's ends. Prefix sums answer ranges that
    start low (the short pool, the compressed band) and suffix sums ranges that run to the top
    (the long pool), so neither subtracts a large total from a nearly equal one.
    """

    def __init__(self, cdf: LengthCdf, law: _LengthLaw) -> None:
        self._law = law
        self.edges = (0, *cdf.tokens)
        self.fracs = (0.0, *cdf.frac)
        self.weights = tuple(
            (f - f_prev) / (t - t_prev)
            for t_prev, t, f_prev, f in zip(self.edges, self.edges[1:], self.fracs, self.fracs[1:], strict=False)
        )
        at_edges = law.running[:, list(self.edges)]
        per_bucket = (at_edges[:, 1:] - at_edges[:, :-1]) * np.asarray(self.weights)
        buckets = len(self.weights)
        self._at_edges = at_edges
        self._edges = np.asarray(self.edges, dtype=np.int64)
        self._weights = np.asarray(self.weights, dtype=np.float64)
        self._below = np.zeros((_ROWS, buckets + 1), dtype=np.float64)
        np.cumsum(per_bucket, axis=1, out=self._below[:, 1:])
        self._above = np.zeros((_ROWS, buckets + 1), dtype=np.float64)
        np.cumsum(per_bucket[:, ::-1], axis=1, out=self._above[:, -2::-1])

    def prefix(self, x_tokens: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """Rows summed over L = 1..x for each x in 0..top; shape (9, len(x))."""
        k = np.maximum(np.searchsorted(self._edges, x_tokens, side="left") - 1, 0)
        part = self._law.running[:, x_tokens] - self._at_edges[:, k]
        rows: npt.NDArray[np.float64] = self._below[:, k] + self._weights[k] * part
        return rows

    def suffix(self, x_tokens: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """Rows summed over L = x..top for each x in 1..top + 1; shape (9, len(x))."""
        k = np.minimum(np.searchsorted(self._edges, x_tokens, side="left") - 1, self._weights.size - 1)
        part = self._at_edges[:, k + 1] - self._law.running[:, x_tokens - 1]
        rows: npt.NDArray[np.float64] = self._above[:, k + 1] + self._weights[k] * part
        return rows

    def cum_mass(self, x_tokens: int) -> float:
        """F(x) for an integer 0 <= x <= top, from the bucket weights."""
        if x_tokens <= 0:
            return 0.0
        k = bisect.bisect_left(self.edges, x_tokens) - 1
        return self.fracs[k] + self.weights[k] * (x_tokens - self.edges[k])

    def quantile_tokens(self, target_mass: float) -> int:
        """Smallest integer L in 1..top with F(L) >= target_mass as ``cum_mass`` evaluates it (top when none)."""
        k = min(bisect.bisect_left(self.fracs, target_mass), len(self.fracs) - 1)
        if k == 0:
            return 1
        lo_tokens, hi_tokens, weight = self.edges[k - 1], self.edges[k], self.weights[k - 1]
        # F is linear inside the bucket (weight > 0 there since F rises past the target): solve,
        # then step to the first length whose rounded F reaches the target.
        guess = lo_tokens + math.ceil((target_mass - self.fracs[k - 1]) / weight) if weight > 0.0 else hi_tokens
        guess = min(max(guess, lo_tokens + 1), hi_tokens)
        while guess > lo_tokens + 1 and self.cum_mass(guess - 1) >= target_mass:
            guess -= 1
        while guess < hi_tokens and self.cum_mass(guess) < target_mass:
            guess += 1
        return guess

    def weights_of(self, lengths: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """Probability of each length in ``lengths`` (all within 1..top)."""
        return self._weights[np.searchsorted(self._edges, lengths, side="left") - 1]


class ExactCalibrator:
    """Closed-form pool calibrations of one CDF for every (B_short, gamma) of a sweep.

    Each calibration is a handful of range sums over the CDF's buckets (``_WeightedSums``),
    evaluated for all gammas of one B at once, so a whole sweep costs O(buckets) set-up plus
    O(log max_tokens) per point, whatever B, gamma and n_max are; the per-length tables behind
    it depend only on the input share and are memoised.
    """

    def __init__(self, cdf: LengthCdf, params: FleetoptParams, *, input_frac: float) -> None:
        """Tabulate the length law of ``cdf``."""
        self._params = params
        self._input_frac = input_frac
        self._top = cdf.max_tokens
        law = _length_law(input_frac, params.chunk_tokens, cdf.max_tokens)
        self._l_out = law.l_out
        self._sums = _WeightedSums(cdf, law)
        self._n_long = slots_per_gpu(params.long_ctx_tokens, params)

    def pools(
        self, b_tokens: int, gamma_b_tokens: tuple[int, ...], p_c: float
    ) -> tuple[tuple[PoolCalibration | None, PoolCalibration | None], ...]:
        """(short, long) calibrations for one B_short and each band top gamma*B, None for an empty pool.

        The short pool holds native L <= B plus compressed borderline requests (weight p_c); the
        long pool L > gamma*B plus borderline requests left uncompressed (weight 1 - p_c).
        Compressed requests are counted at L = B for the P99 prefill, an upper bound within one token.

        Args:
            b_tokens: B_short, the short pool's context window.
            gamma_b_tokens: floor(gamma * B) per gamma, each >= B.
            p_c: effective compressibility of the borderline band.
        """
        top = self._top
        tops = np.minimum(np.asarray(gamma_b_tokens, dtype=np.int64), top)
        n_short = slots_per_gpu(b_tokens, self._params)
        native_row = self._sums.prefix(np.asarray([min(b_tokens, top)], dtype=np.int64))
        native = self._native(native_row, n_short)
        short = native.plus(self._compressed(b_tokens, tops, n_short), p_c)
        # Suffix sums at B + 1 and at each gamma*B + 1: the band is their difference, the rest lies above.
        ends = self._sums.suffix(np.concatenate(([min(b_tokens, top) + 1], tops + 1)))
        band = self._native(ends[:, :1] - ends[:, 1:], self._n_long)
        above = self._native(ends[:, 1:], self._n_long)
        long = above.plus(band, 1.0 - p_c)
        cum_b = self._sums.cum_mass(min(b_tokens, top))
        native_mass = float(native.mass[0])
        band_masses = ((1.0 - p_c) * band.mass).tolist()
        short_rows = zip(short.mass.tolist(), short.s1.tolist(), short.s2.tolist(), short.pre.tolist(), strict=True)
        long_rows = zip(long.mass.tolist(), long.s1.tolist(), long.s2.tolist(), long.pre.tolist(), strict=True)
        out: list[tuple[PoolCalibration | None, PoolCalibration | None]] = []
        for gb, band_mass, short_row, long_row in zip(tops.tolist(), band_masses, short_rows, long_rows, strict=True):
            short_calib = None
            if short_row[0] > 0.0:
                target = PREFILL_QUANTILE_FRAC * short_row[0]
                l99 = self._sums.quantile_tokens(target) if target <= native_mass else b_tokens
                short_calib = self._finish(short_row, n_short, min(l99, b_tokens))
            long_calib = None
            if long_row[0] > 0.0:
                target = PREFILL_QUANTILE_FRAC * long_row[0]
                if target <= band_mass:
                    l99 = self._sums.quantile_tokens(cum_b + target / (1.0 - p_c))
                else:
                    l99 = self._sums.quantile_tokens(self._sums.cum_mass(gb) + (target - band_mass))
                long_calib = self._finish(long_row, self._n_long, l99)
            out.append((short_calib, long_calib))
        return tuple(out)

    def _native(self, rows: npt.NDArray[np.float64], n_slots: int) -> _Moments:
        """Moments of requests served as they are, from range row sums of shape (9, K), at n_max = n_slots."""
        p = self._params
        k_n = p.h_s_per_slot / p.calib_ctx_tokens * n_slots
        return _Moments(
            mass=rows[_MASS],
            s1=p.w_s * rows[_M] + k_n * rows[_LM],
            s2=p.w_s * p.w_s * rows[_M2] + 2.0 * p.w_s * k_n * rows[_LM2] + k_n * k_n * rows[_L2M2],
            pre=(p.w_s + p.h_s_per_slot) * rows[_CHUNKS],
        )

    def _compressed(self, b_tokens: int, tops: npt.NDArray[np.int64], n_slots: int) -> _Moments:
        """Requests of original length B + 1 .. top compressed to B_short (Eq. 15), at n_max = n_slots, per top.

        Such a request keeps l_out and its prompt becomes max(1, B - l_out), so while l_out < B it
        holds S = (ceil((B - l_out) / C_chunk) + l_out) (W + H (B / C_calib) n): on each run of
        lengths with the same chunk count j that needs only sum w, sum w l_out and sum w l_out^2.
        l_out is non-decreasing in L, so the runs are found by bisection. Outputs of B or more
        (possible only for gamma >= 1 / (1 - input_frac)) are summed length by length.
        """
        p = self._params
        chunk = p.chunk_tokens
        lo = b_tokens + 1
        zeros = np.zeros(tops.size, dtype=np.float64)
        mass, s1, s2, pre = zeros.copy(), zeros.copy(), zeros.copy(), zeros.copy()
        hi_max = int(tops.max())
        if lo > hi_max:
            return _Moments(mass=mass, s1=s1, s2=s2, pre=pre)
        t_iter = p.w_s + p.h_s_per_slot * (b_tokens / p.calib_ctx_tokens) * n_slots
        prefill_s_per_chunk = p.w_s + p.h_s_per_slot
        out_lo, out_hi = int(self._l_out[lo]), int(self._l_out[hi_max])
        if out_lo < b_tokens:
            j_hi = -(-(b_tokens - out_lo) // chunk)
            j_lo = -(-(b_tokens - min(out_hi, b_tokens - 1)) // chunk)
            # The run with j chunks starts at the first length whose output reaches B - j * C_chunk.
            counts = np.arange(j_hi, j_lo - 2, -1, dtype=np.int64)
            edges = np.searchsorted(self._l_out, b_tokens - counts * chunk, side="left")
            run_lo = np.maximum(lo, edges[:-1])[:, None]  # shape (runs, 1)
            run_hi = np.minimum(tops[None, :], edges[1:, None] - 1)  # shape (runs, K)
            live = run_lo <= run_hi
            grid_hi = np.where(live, run_hi, 0).ravel()
            grid_lo = np.where(live, run_lo - 1, 0).ravel()
            sums = (self._sums.prefix(grid_hi) - self._sums.prefix(grid_lo)).reshape(_ROWS, *live.shape)
            j = counts[:-1, None].astype(np.float64)
            m0, m1, m2 = sums[_MASS], sums[_OUT], sums[_OUT2]
            mass += m0.sum(axis=0)
            s1 += t_iter * (j * m0 + m1).sum(axis=0)
            s2 += t_iter * t_iter * (j * j * m0 + 2.0 * j * m1 + m2).sum(axis=0)
            pre += prefill_s_per_chunk * (j * m0).sum(axis=0)
        tail_lo = max(lo, int(np.searchsorted(self._l_out, b_tokens, side="left")))
        for i, hi in enumerate(tops.tolist()):
            if tail_lo > hi:
                continue
            # The prompt is cut to one token: S = (1 + l_out) (W + H ((1 + l_out) / C_calib) n).
            w = self._sums.weights_of(np.arange(tail_lo, hi + 1, dtype=np.int64))
            held = 1.0 + self._l_out[tail_lo : hi + 1]
            service = held * (p.w_s + p.h_s_per_slot * (held / p.calib_ctx_tokens) * n_slots)
            mass[i] += w.sum()
            s1[i] += (w * service).sum()
            s2[i] += (w * service * service).sum()
            pre[i] += prefill_s_per_chunk * w.sum()
        return _Moments(mass=mass, s1=s1, s2=s2, pre=pre)

    def _finish(self, moments: tuple[float, float, float, float], n_slots: int, l99_tokens: int) -> PoolCalibration:
        """The calibration from one pool's (mass, sum w S, sum w S^2, sum w prefill) and its P99 length."""
        mass, s1, s2, pre = moments
        e1 = s1 / mass
        e2 = s2 / mass
        l_in, _ = split_tokens(l99_tokens, self._input_frac)
        p = self._params
        first_decode = p.w_s + p.h_s_per_slot * (l99_tokens / p.calib_ctx_tokens) * n_slots
        return PoolCalibration(
            n_slots=n_slots,
            mean_service_s=e1,
            cv2=max(0.01, e2 / (e1 * e1) - 1.0),
            mu_gpu_per_s=n_slots / e1,
            mean_prefill_s=pre / mass,
            ttft_overhead_s=prefill_s(l_in, p) + first_decode,
        )


def _size(rate_per_s: float, calib: PoolCalibration | None, params: FleetoptParams) -> PoolSizing:
    if calib is None or rate_per_s <= params.min_pool_rate_per_s:
        return evaluate_pool(0, rate_per_s, None, params)
    return size_pool(rate_per_s, calib, params)


def _point(
    split: RoutingSplit, short_calib: PoolCalibration | None, long_calib: PoolCalibration | None, params: FleetoptParams
) -> PlanPoint:
    short = _size(split.short_rate_per_s, short_calib, params)
    long = _size(split.long_rate_per_s, long_calib, params)
    return PlanPoint(
        split=split,
        short_ctx_tokens=split.b_short_tokens,
        short_slots=slots_per_gpu(split.b_short_tokens, params),
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


def reference_sweep(
    inputs: FleetoptInputs, params: FleetoptParams, b_short_tokens: tuple[int, ...] | None = None
) -> tuple[PlanPoint, ...]:
    """Every (B, gamma) point of an exact-mode sweep, B by B, each pool sized on its own."""
    calibrator = ExactCalibrator(inputs.cdf, params, input_frac=inputs.input_frac)
    bs = b_short_candidates(inputs, params) if b_short_tokens is None else b_short_tokens
    points: list[PlanPoint] = []
    for b in bs:
        splits = tuple(split_traffic(inputs.cdf, inputs.arrival_rate_per_s, b, g, inputs.p_c) for g in params.gammas)
        pools = calibrator.pools(b, tuple(s.gamma_b_tokens for s in splits), inputs.p_c)
        for split, (short_calib, long_calib) in zip(splits, pools, strict=True):
            keep_long = split.long_rate_per_s > params.min_pool_rate_per_s
            points.append(_point(split, short_calib, long_calib if keep_long else None, params))
    return tuple(points)


def reference_homogeneous(inputs: FleetoptInputs, params: FleetoptParams) -> PlanPoint:
    """The single 64K-context pool serving every request, calibrated and sized as above."""
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
    calibrator = ExactCalibrator(inputs.cdf, params, input_frac=inputs.input_frac)
    ((short_calib, _),) = calibrator.pools(ctx, (ctx,), inputs.p_c)
    point = _point(split, short_calib, None, params)
    return PlanPoint(
        split=split,
        short_ctx_tokens=ctx,
        short_slots=point.short_slots,
        long_ctx_tokens=ctx,
        long_slots=point.long_slots,
        short_calib=short_calib,
        long_calib=None,
        short=point.short,
        long=point.long,
        cost_usd_per_hr=point.cost_usd_per_hr,
        slo_met=point.slo_met,
        homogeneous=True,
    )
