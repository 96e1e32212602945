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
* ``ExactCalibrator``: the expectation of the same law in closed form with prefix sums, O(1) per
  (B, gamma) after an O(B) set-up per B.

Deviation: in exact mode the short pool is calibrated on the post-compression mixture (native
requests plus compressed ones at L = B_short keeping their full output), and the long pool on
every request it receives, including borderline requests that were not compressed (weight 1 - p_c).
The paper and its code calibrate both pools on native slices only; spec section 2.7 shows this
under-sizes the short pool by up to 2x.
"""

from __future__ import annotations

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


def _bucket_weights(cdf: LengthCdf) -> npt.NDArray[np.float64]:
    """Probability of each integer length, shape (max_tokens + 1,), index 0 unused (0.0)."""
    weights = np.zeros(cdf.max_tokens + 1, dtype=np.float64)
    prev_t, prev_f = 0, 0.0
    for t, f in zip(cdf.tokens, cdf.frac, strict=True):
        weights[prev_t + 1 : t + 1] = (f - prev_f) / (t - prev_t)
        prev_t, prev_f = t, f
    return weights


@dataclass(frozen=True, slots=True, kw_only=True)
class _Moments:
    """Weighted sums over a set of requests: mass, sum w S, sum w S^2, sum w prefill."""

    mass: float
    s1: float
    s2: float
    pre: float

    def plus(self, other: _Moments, scale: float = 1.0) -> _Moments:
        return _Moments(
            mass=self.mass + scale * other.mass,
            s1=self.s1 + scale * other.s1,
            s2=self.s2 + scale * other.s2,
            pre=self.pre + scale * other.pre,
        )


class _Table:
    """Suffix sums of weighted service moments over lengths 1..n: sum over L >= i in O(1)."""

    def __init__(
        self, weights: npt.NDArray[np.float64], service: npt.NDArray[np.float64], prefill: npt.NDArray[np.float64]
    ) -> None:
        def suffix(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
            out = np.zeros(values.size + 1, dtype=np.float64)
            out[:-1] = np.cumsum(values[::-1])[::-1]
            return out

        self._mass = suffix(weights)
        self._s1 = suffix(weights * service)
        self._s2 = suffix(weights * service * service)
        self._pre = suffix(weights * prefill)
        self._size = weights.size

    def between(self, lo: int, hi: int) -> _Moments:
        """Sums over array indices lo..hi inclusive (empty when lo > hi)."""
        lo, hi = max(lo, 0), min(hi, self._size - 1)
        if lo > hi:
            return _Moments(mass=0.0, s1=0.0, s2=0.0, pre=0.0)
        return _Moments(
            mass=float(self._mass[lo] - self._mass[hi + 1]),
            s1=float(self._s1[lo] - self._s1[hi + 1]),
            s2=float(self._s2[lo] - self._s2[hi + 1]),
            pre=float(self._pre[lo] - self._pre[hi + 1]),
        )


class ExactCalibrator:
    """Closed-form pool calibrations of one CDF for every (B_short, gamma) of a sweep.

    Builds the per-length tables once (O(max_tokens)), one short-pool table per B on first use
    (O(B)), and answers each calibration in O(log max_tokens).
    """

    def __init__(self, cdf: LengthCdf, params: FleetoptParams, *, input_frac: float) -> None:
        """Tabulate the length law of ``cdf`` and the long pool's service times."""
        self._params = params
        self._input_frac = input_frac
        self._weights = _bucket_weights(cdf)
        self._cum_mass = np.cumsum(self._weights)
        lengths = np.arange(self._weights.size, dtype=np.int64)
        lengths[0] = 1
        self._l_in = np.maximum(1, np.floor(input_frac * lengths).astype(np.int64))
        self._l_out = np.maximum(1, lengths - self._l_in)
        self._n_long = slots_per_gpu(params.long_ctx_tokens, params)
        self._long = _Table(
            self._weights, self._service(self._l_in, self._l_out, self._n_long), self._prefill(self._l_in)
        )
        self._short: dict[int, tuple[_Table, _Table]] = {}

    def _service(
        self, l_in: npt.NDArray[np.int64], l_out: npt.NDArray[np.int64], n_slots: int
    ) -> npt.NDArray[np.float64]:
        p = self._params
        t_iter = p.w_s + p.h_s_per_slot * ((l_in + l_out) / p.calib_ctx_tokens) * n_slots
        chunks = np.ceil(l_in / p.chunk_tokens)
        return np.asarray((chunks + l_out) * t_iter, dtype=np.float64)

    def _prefill(self, l_in: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        p = self._params
        return np.asarray(np.ceil(l_in / p.chunk_tokens) * (p.w_s + p.h_s_per_slot), dtype=np.float64)

    def _short_tables(self, b_tokens: int) -> tuple[_Table, _Table]:
        """Tables of native requests at the short pool's n_max, and of compressed ones indexed by L_orig."""
        if b_tokens not in self._short:
            n_short = slots_per_gpu(b_tokens, self._params)
            native = _Table(
                self._weights[: b_tokens + 1],
                self._service(self._l_in[: b_tokens + 1], self._l_out[: b_tokens + 1], n_short),
                self._prefill(self._l_in[: b_tokens + 1]),
            )
            # A compressed request keeps its output and its prompt is cut to B - l_out (Eq. 15).
            # Only lengths up to the widest band, floor(max(gammas) * B), can be compressed.
            top = min(self._weights.size - 1, int(max(self._params.gammas) * b_tokens)) + 1
            comp_out = self._l_out[:top]
            comp_in = np.maximum(1, b_tokens - comp_out)
            compressed = _Table(self._weights[:top], self._service(comp_in, comp_out, n_short), self._prefill(comp_in))
            self._short[b_tokens] = (native, compressed)
        return self._short[b_tokens]

    def _quantile_tokens(self, target_mass: float) -> int:
        """Smallest L with cumulative native mass >= target_mass."""
        index = int(np.searchsorted(self._cum_mass, target_mass, side="left"))
        return min(max(index, 1), self._weights.size - 1)

    def _finish(self, moments: _Moments, n_slots: int, l99_tokens: int) -> PoolCalibration:
        e1 = moments.s1 / moments.mass
        e2 = moments.s2 / moments.mass
        l_in, _ = split_tokens(l99_tokens, self._input_frac)
        p = self._params
        first_decode = p.w_s + p.h_s_per_slot * (l99_tokens / p.calib_ctx_tokens) * n_slots
        return PoolCalibration(
            n_slots=n_slots,
            mean_service_s=e1,
            cv2=max(0.01, e2 / (e1 * e1) - 1.0),
            mu_gpu_per_s=n_slots / e1,
            mean_prefill_s=moments.pre / moments.mass,
            ttft_overhead_s=prefill_s(l_in, p) + first_decode,
        )

    def short_pool(self, b_tokens: int, gamma_b_tokens: int, p_c: float) -> PoolCalibration | None:
        """The short pool: native L <= B plus compressed borderline requests (weight p_c), or None if empty.

        Compressed requests are counted at L = B for the P99 prefill, an upper bound within one token.
        """
        native_table, compressed_table = self._short_tables(b_tokens)
        native = native_table.between(1, b_tokens)
        compressed = compressed_table.between(b_tokens + 1, gamma_b_tokens)
        moments = native.plus(compressed, p_c)
        if moments.mass <= 0.0:
            return None
        target = PREFILL_QUANTILE_FRAC * moments.mass
        l99 = self._quantile_tokens(target) if target <= native.mass else b_tokens
        return self._finish(moments, slots_per_gpu(b_tokens, self._params), min(l99, b_tokens))

    def long_pool(self, b_tokens: int, gamma_b_tokens: int, p_c: float) -> PoolCalibration | None:
        """The long pool: L > gamma*B plus borderline requests left uncompressed (weight 1 - p_c), or None."""
        band = self._long.between(b_tokens + 1, gamma_b_tokens)
        above = self._long.between(gamma_b_tokens + 1, self._weights.size - 1)
        moments = above.plus(band, 1.0 - p_c)
        if moments.mass <= 0.0:
            return None
        target = PREFILL_QUANTILE_FRAC * moments.mass
        band_mass = (1.0 - p_c) * band.mass
        cum_b = float(self._cum_mass[min(b_tokens, self._weights.size - 1)])
        cum_gb = float(self._cum_mass[min(gamma_b_tokens, self._weights.size - 1)])
        if target <= band_mass:
            l99 = self._quantile_tokens(cum_b + target / (1.0 - p_c))
        else:
            l99 = self._quantile_tokens(cum_gb + (target - band_mass))
        return self._finish(moments, self._n_long, l99)
