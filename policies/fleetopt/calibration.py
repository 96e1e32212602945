"""Per-pool service-time calibration: KV slots, Eqs. 3-4 and the pool's E[S], Cs^2 and mu_gpu.

Seed 002 sections 3.2 and 6 (Algorithm 1 lines 7-8); spec seed-002 sections 1.3, 1.4, 2.3 and 2.7.
A request of total length L holds one KV slot for S = (ceil(l_in / C_chunk) + l_out) * t_iter with
t_iter = W + H (L / C_calib) n_max (the reference's sequence-length-aware form of Eq. 3, without which
the tables do not reproduce), so mu_gpu = n_max / E[S].

Two calibrations of the same law (L uniform on the integers of each CDF bucket):

* ``calibrate_paper``: the reference's Monte Carlo, 3000 draws of ``random.Random(42)`` in its call
  order, on the native slices of ``LengthCdf.short_slice`` / ``long_slice``. It is the only way to
  reproduce Tables 3 and 6 number for number (spec section 2.3), which is why this pure module
  uses Python's ``random`` at all.
* ``ExactCalibrator``: the expectation of the same law in closed form: range sums over the CDF's
  buckets of n-independent per-length terms, O(log max_tokens) per (B, gamma) after a set-up that
  depends only on the input share (memoised).

Deviation: in exact mode the short pool is calibrated on the post-compression mixture (native
requests plus compressed ones at L = B_short keeping their full output), and the long pool on
every request it receives, including borderline requests that were not compressed (weight 1 - p_c).
The paper and its code calibrate both pools on native slices only; spec section 2.7 shows this
under-sizes the short pool by up to 2x.
"""

from __future__ import annotations

import bisect
import functools
import math
import random
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from policies.fleetopt.cdf import LengthCdf
from policies.fleetopt.params import FleetoptParams

#: Quantile of the pool's prefill time the exact mode budgets for (Eq. 8: T_prefill^(99)).
PREFILL_QUANTILE_FRAC = 0.99


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolCalibration:
    """Service-time statistics of one pool.

    Attributes:
        n_slots: KV slots per GPU, n_max of the pool.
        mean_service_s: E[S], slot holding time of one request.
        cv2: Cs^2 = Var[S] / E[S]^2 (floored at 0.01 as the reference does).
        mu_gpu_per_s: n_max / E[S], requests per second per GPU.
        mean_prefill_s: mean prefill time at the batch-1 iteration latency W + H.
        ttft_overhead_s: what the P99 TTFT adds to the P99 queue wait: the mean prefill in paper mode
            (the reference's prediction), P99 prefill plus one full-occupancy decode step in exact mode (Eq. 8).
    """

    n_slots: int
    mean_service_s: float
    cv2: float
    mu_gpu_per_s: float
    mean_prefill_s: float
    ttft_overhead_s: float


def slots_per_gpu(ctx_tokens: int, params: FleetoptParams) -> int:
    """KV slots per GPU for a pool of context window ``ctx_tokens`` (spec section 1.3).

    n_max = min(floor(n_calib * C_calib / C_max), kv_blocks // ceil(C_max / block)); 16 at 64K,
    256 at 4K, 682 at 1.5K for the A100 profile. At least 1.
    """
    by_compute = params.calib_slots * params.calib_ctx_tokens // ctx_tokens
    by_memory = params.kv_blocks // math.ceil(ctx_tokens / params.kv_block_tokens)
    return max(1, min(by_compute, by_memory))


def split_tokens(total_tokens: int, input_frac: float) -> tuple[int, int]:
    """(l_in, l_out) of a request of ``total_tokens``: l_in = max(1, floor(f L)), l_out = max(1, L - l_in)."""
    l_in = max(1, int(input_frac * total_tokens))
    return l_in, max(1, total_tokens - l_in)


def service_time_s(l_in: int, l_out: int, n_slots: int, params: FleetoptParams) -> float:
    """Slot holding time S of one request at full occupancy (Eqs. 3-4 with H scaled by L / C_calib)."""
    h_eff = params.h_s_per_slot * ((l_in + l_out) / params.calib_ctx_tokens)
    t_iter = params.w_s + h_eff * n_slots
    return (math.ceil(l_in / params.chunk_tokens) + l_out) * t_iter


def prefill_s(l_in: int, params: FleetoptParams) -> float:
    """Prefill time of a prompt of ``l_in`` tokens in C_chunk chunks at the batch-1 iteration W + H."""
    return math.ceil(l_in / params.chunk_tokens) * (params.w_s + params.h_s_per_slot)


def calibrate_paper(
    cdf: LengthCdf, pool_ctx_tokens: int, params: FleetoptParams, *, input_frac: float, lo_clamp_tokens: int = 1
) -> PoolCalibration:
    """Monte Carlo calibration exactly as the reference runs it (spec section 2.3, ``calibrate``).

    Draws ``params.mc_samples`` lengths with ``random.Random(params.mc_seed)``: a uniform u picks
    the first bucket with u <= F, then L is a uniform integer in [max(lo_clamp, prev + 1),
    min(pool_ctx, t)] (or pool_ctx when that is empty).

    Args:
        cdf: the pool's slice of the workload CDF.
        pool_ctx_tokens: C_max of the pool; sets n_max and caps L.
        params: planner parameters (profile, sample count, seed).
        input_frac: share of L that is prompt (0.8 for the paper's tables).
        lo_clamp_tokens: smallest L the first bucket may draw (gamma*B for the long pool).
    """
    rng = random.Random(params.mc_seed)
    n_slots = slots_per_gpu(pool_ctx_tokens, params)
    services: list[float] = []
    prefills: list[float] = []
    for _ in range(params.mc_samples):
        u = rng.random()
        prev = 0
        for thresh, frac in zip(cdf.tokens, cdf.frac, strict=True):
            if u <= frac:
                lo = max(lo_clamp_tokens, prev + 1)
                hi = min(pool_ctx_tokens, thresh)
                total = rng.randint(lo, hi) if lo <= hi else pool_ctx_tokens
                l_in, l_out = split_tokens(total, input_frac)
                services.append(service_time_s(l_in, l_out, n_slots, params))
                prefills.append(prefill_s(l_in, params))
                break
            prev = thresh
    e1 = sum(services) / len(services)
    e2 = sum(s * s for s in services) / len(services)
    mean_prefill = sum(prefills) / len(prefills)
    return PoolCalibration(
        n_slots=n_slots,
        mean_service_s=e1,
        cv2=max(0.01, e2 / (e1 * e1) - 1.0),
        mu_gpu_per_s=n_slots / e1,
        mean_prefill_s=mean_prefill,
        ttft_overhead_s=mean_prefill,
    )


#: The reference's stand-in for a long pool without any CDF mass above gamma*B (spec section 2.3).
EMPTY_POOL_CALIBRATION = PoolCalibration(
    n_slots=1, mean_service_s=100.0, cv2=1.0, mu_gpu_per_s=0.01, mean_prefill_s=0.0, ttft_overhead_s=0.0
)


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
