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
  depends only on the input share, the CDF's breakpoints and the points (memoised): one compiled
  pass over the lengths that keeps the running sums where the sweep reads them (``kernels.py``).

Deviation: in exact mode the short pool is calibrated on the post-compression mixture (native
requests plus compressed ones at L = B_short keeping their full output), and the long pool on
every request it receives, including borderline requests that were not compressed (weight 1 - p_c).
The paper and its code calibrate both pools on native slices only; spec section 2.7 shows this
under-sizes the short pool by up to 2x.
"""

from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from policies.fleetopt import kernels
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
#: The rows a run of compressed requests needs: sum w, sum w l_out, sum w l_out^2.
_RUN_ROWS = np.asarray((_MASS, _OUT, _OUT2), dtype=np.intp)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class _LengthLaw:
    """The split of every length 1..top under one input share, read where a sweep needs it.

    Nothing is tabulated per length: l_out is non-decreasing in L, so its values and the first
    length reaching an output are computed where asked (``kernels.first_output_at_least``), and the
    running sums of the per-length rows only at the lengths a sweep reads (``_running_at``).

    Attributes:
        input_frac: the input share f: l_in = max(1, floor(f L)) (spec seed-002 section 1.4).
        chunk_tokens: C_chunk of the prefill chunks counted in m.
        top_tokens: the longest length, the CDF's last breakpoint.

    Compared and hashed by identity: ``_length_law`` memoises one per input share, and
    ``_tabulate`` memoises on it.
    """

    input_frac: float
    chunk_tokens: int
    top_tokens: int

    def l_out_at(self, lengths: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """l_out of each length (0 as for L = 1), as ``split_tokens`` gives it."""
        total = np.maximum(lengths, 1)
        l_in = np.maximum(1, np.floor(self.input_frac * total).astype(np.int64))
        l_out: npt.NDArray[np.int64] = np.maximum(1, total - l_in)
        return l_out

    def first_l_out_at_least(self, values: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Smallest L in 0..top with l_out(L) >= each value, top + 1 when none (searchsorted on l_out(0..top))."""
        flat = np.ascontiguousarray(values, dtype=np.int64).ravel()
        first = np.empty_like(flat)
        kernels.first_output_at_least(self.input_frac, self.top_tokens, flat, first)
        return first.reshape(np.shape(values))


@functools.lru_cache(maxsize=8)
def _length_law(input_frac: float, chunk_tokens: int, top_tokens: int) -> _LengthLaw:
    """The law of one input share, C_chunk and longest length (memoised, so ``_tabulate`` can key on it)."""
    return _LengthLaw(input_frac=input_frac, chunk_tokens=chunk_tokens, top_tokens=top_tokens)


def _running_at(law: _LengthLaw, x_tokens: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
    """The rows summed over L = 1..x for each x of ``x_tokens`` (>= 0, any order, repeats allowed); shape (9, len(x)).

    One compiled pass over lengths 1..max(x) that stores the running sums only at the x a sweep
    reads (``kernels.running_sums``): the same floats as a running sum of the per-length rows over
    every length, in O(max x) time and O(len(x)) memory. The mass row's sum is x itself.
    """
    x_tokens = np.ascontiguousarray(x_tokens, dtype=np.int64)
    running = np.zeros((_ROWS, x_tokens.size), dtype=np.float64)
    running[_MASS] = x_tokens
    kernels.running_sums(law.input_frac, law.chunk_tokens, x_tokens, np.argsort(x_tokens), running)
    return running


class _WeightedSums:
    """Range sums of the service terms under one CDF, in O(log buckets) per range.

    The CDF puts the same weight w_k on every integer length of bucket (t_{k-1}, t_k], so a sum
    over any range is whole buckets (accumulated once per CDF) plus w_k times a difference of the
    unweighted running sums of ``_LengthLaw`` at the range's ends (``_Tabulation``, given with
    each range). Prefix sums answer ranges that start low (the short pool, the compressed band) and
    suffix sums ranges that run to the top (the long pool), so neither subtracts a large total from
    a nearly equal one.
    """

    def __init__(self, cdf: LengthCdf, at_edges: npt.NDArray[np.float64]) -> None:
        """``at_edges``: the running sums at 0 and at each breakpoint of ``cdf``, shape (9, buckets + 1)."""
        self._edges = np.asarray((0, *cdf.tokens), dtype=np.int64)
        self._fracs = np.asarray((0.0, *cdf.frac), dtype=np.float64)
        self._weights = np.diff(self._fracs) / np.diff(self._edges)
        per_bucket = (at_edges[:, 1:] - at_edges[:, :-1]) * self._weights
        buckets = self._weights.size
        self._at_edges = at_edges
        self._at_edges_runs = np.ascontiguousarray(at_edges[_RUN_ROWS])
        self._below = np.zeros((_ROWS, buckets + 1), dtype=np.float64)
        np.cumsum(per_bucket, axis=1, out=self._below[:, 1:])
        self._below_runs = np.ascontiguousarray(self._below[_RUN_ROWS])
        self._above = np.zeros((_ROWS, buckets + 1), dtype=np.float64)
        np.cumsum(per_bucket[:, ::-1], axis=1, out=self._above[:, -2::-1])

    def prefix(self, x_tokens: npt.NDArray[np.int64], running: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """Rows summed over L = 1..x for each x in 0..top, from the running sums at x; shape (9, len(x))."""
        k = np.maximum(np.searchsorted(self._edges, x_tokens, side="left") - 1, 0)
        # take() gathers columns several times faster than fancy indexing; the values are the same.
        part = running - self._at_edges.take(k, axis=1)
        rows: npt.NDArray[np.float64] = self._below.take(k, axis=1) + self._weights[k] * part
        return rows

    def prefix_runs(self, x_tokens: npt.NDArray[np.int64], running: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """``prefix`` of the rows ``_RUN_ROWS`` only, from their running sums at x; shape (3, len(x))."""
        k = np.maximum(np.searchsorted(self._edges, x_tokens, side="left") - 1, 0)
        part = running - self._at_edges_runs.take(k, axis=1)
        sums: npt.NDArray[np.float64] = self._below_runs.take(k, axis=1) + self._weights[k] * part
        return sums

    def suffix(
        self, x_tokens: npt.NDArray[np.int64], running_below: npt.NDArray[np.float64]
    ) -> npt.NDArray[np.float64]:
        """Rows summed over L = x..top for each x in 1..top + 1, from the running sums at x - 1; shape (9, len(x))."""
        k = np.minimum(np.searchsorted(self._edges, x_tokens, side="left") - 1, self._weights.size - 1)
        part = self._at_edges.take(k + 1, axis=1) - running_below
        rows: npt.NDArray[np.float64] = self._above.take(k + 1, axis=1) + self._weights[k] * part
        return rows

    def cum_mass_columns(self, x_tokens: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """F(x) for integers 0 <= x <= top, from the bucket weights (exactly F(0) = 0)."""
        k = np.maximum(np.searchsorted(self._edges, x_tokens, side="left") - 1, 0)
        mass: npt.NDArray[np.float64] = self._fracs[k] + self._weights[k] * (x_tokens - self._edges[k])
        return mass

    def quantile_columns(self, target_mass: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
        """Smallest integer L in 1..top with F(L) >= each target, as ``cum_mass_columns`` rounds it (top when none)."""
        k = np.minimum(np.searchsorted(self._fracs, target_mass, side="left"), self._fracs.size - 1)
        below = np.maximum(k - 1, 0)
        lo_tokens, hi_tokens = self._edges[below], self._edges[k]
        weight, base = self._weights[below], self._fracs[below]
        # F is linear inside the bucket (weight > 0 there since F rises past the target): solve,
        # then step to the first length whose rounded F reaches the target.
        with np.errstate(divide="ignore", invalid="ignore"):
            solved = lo_tokens + np.ceil((target_mass - base) / weight)
        guess = np.where(weight > 0.0, solved, hi_tokens)
        guess = np.minimum(np.maximum(guess, lo_tokens + 1), hi_tokens).astype(np.int64)
        while True:
            down = (guess > lo_tokens + 1) & (base + weight * (guess - 1 - lo_tokens) >= target_mass)
            if not down.any():
                break
            guess -= down
        while True:
            up = (guess < hi_tokens) & (base + weight * (guess - lo_tokens) < target_mass)
            if not up.any():
                break
            guess += up
        tokens: npt.NDArray[np.int64] = np.where(k == 0, 1, guess)
        return tokens

    def weights_of(self, lengths: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """Probability of each length in ``lengths`` (all within 1..top)."""
        return self._weights[np.searchsorted(self._edges, lengths, side="left") - 1]


@dataclass(frozen=True, slots=True, kw_only=True)
class CalibrationColumns:
    """Calibrations of one pool kind (short or long) for many sweep points, one column per point.

    The fields are those of ``PoolCalibration``; ``present`` is False where the pool receives no
    mass (``PoolCalibration`` None), and the other fields are meaningless there.
    """

    present: npt.NDArray[np.bool_]
    n_slots: npt.NDArray[np.int64]
    mean_service_s: npt.NDArray[np.float64]
    cv2: npt.NDArray[np.float64]
    mu_gpu_per_s: npt.NDArray[np.float64]
    mean_prefill_s: npt.NDArray[np.float64]
    ttft_overhead_s: npt.NDArray[np.float64]

    def at(self, index: int) -> PoolCalibration:
        """The calibration of column ``index`` as an object (read ``present`` first)."""
        return PoolCalibration(
            n_slots=self.n_slots.item(index),
            mean_service_s=self.mean_service_s.item(index),
            cv2=self.cv2.item(index),
            mu_gpu_per_s=self.mu_gpu_per_s.item(index),
            mean_prefill_s=self.mean_prefill_s.item(index),
            ttft_overhead_s=self.ttft_overhead_s.item(index),
        )

    def columns(self, start: int, stop: int) -> CalibrationColumns:
        """Columns start..stop - 1 (views)."""
        return CalibrationColumns(
            present=self.present[start:stop],
            n_slots=self.n_slots[start:stop],
            mean_service_s=self.mean_service_s[start:stop],
            cv2=self.cv2[start:stop],
            mu_gpu_per_s=self.mu_gpu_per_s[start:stop],
            mean_prefill_s=self.mean_prefill_s[start:stop],
            ttft_overhead_s=self.ttft_overhead_s[start:stop],
        )

    def all(self) -> list[PoolCalibration | None]:
        """Every column as an object (``at`` for each, with one array-to-list conversion per field)."""
        fields = zip(
            self.present.tolist(),
            self.n_slots.tolist(),
            self.mean_service_s.tolist(),
            self.cv2.tolist(),
            self.mu_gpu_per_s.tolist(),
            self.mean_prefill_s.tolist(),
            self.ttft_overhead_s.tolist(),
            strict=True,
        )
        return [
            PoolCalibration(
                n_slots=n, mean_service_s=e1, cv2=cv2, mu_gpu_per_s=mu, mean_prefill_s=pre, ttft_overhead_s=over
            )
            if present
            else None
            for present, n, e1, cv2, mu, pre, over in fields
        ]


def slots_per_gpu_columns(ctx_tokens: npt.NDArray[np.int64], params: FleetoptParams) -> npt.NDArray[np.int64]:
    """``slots_per_gpu`` of each context window, in integer arithmetic as the scalar form."""
    by_compute = params.calib_slots * params.calib_ctx_tokens // ctx_tokens
    by_memory = params.kv_blocks // -(-ctx_tokens // params.kv_block_tokens)
    slots: npt.NDArray[np.int64] = np.maximum(1, np.minimum(by_compute, by_memory))
    return slots


@dataclass(frozen=True, slots=True, kw_only=True)
class _RunLayout:
    """Where the compressed requests of each point lie, by chunk count; nothing here depends on the CDF.

    Attributes:
        chunks: shape (runs, K), the chunk count j of each run of each point (0 on padding).
        live: flat indices into (runs, K) of the runs holding at least one length.
        ends: the live runs' last lengths, then their first lengths minus 1 (prefix-sum arguments).
        tails: (point, first, last length) of the lengths whose output reaches B, summed one by one.
        alone: (point, runs) of the points that are their B's only point and have 3 runs or more.
    """

    chunks: npt.NDArray[np.float64]
    live: npt.NDArray[np.intp]
    ends: npt.NDArray[np.int64]
    tails: tuple[tuple[int, int, int], ...]
    alone: tuple[tuple[int, int], ...]


def _run_layout(
    law: _LengthLaw, chunk_tokens: int, b_tokens: npt.NDArray[np.int64], tops: npt.NDArray[np.int64]
) -> _RunLayout:
    """The runs of lengths B + 1 .. top with the same chunk count after compression, for every point.

    A compressed request keeps l_out and gets ceil((B - l_out) / C_chunk) prompt chunks; l_out is
    non-decreasing in L, so the run with j chunks starts at the first length whose output reaches
    B - j * C_chunk and ends where the run with j - 1 starts (bisection on l_out). The runs of
    every B are padded to the longest list with empty ones, so one array pass serves all points; an
    empty run adds an exact 0 after the live ones, so each point's sums are those of its own runs.
    Depends on the input share (through ``law``), C_chunk and the points only (memoised with
    ``_tabulate``).
    """
    distinct = np.asarray(sorted(set(b_tokens.tolist())), dtype=np.int64)
    group = np.searchsorted(distinct, b_tokens)
    group_top = np.zeros(distinct.size, dtype=np.int64)
    np.maximum.at(group_top, group, tops)
    lo = distinct + 1
    out_lo = law.l_out_at(np.minimum(lo, law.top_tokens))
    out_hi = law.l_out_at(group_top)
    has_runs = (lo <= group_top) & (out_lo < distinct)
    # Chunk counts run from j_hi down to j_lo - 1.
    j_hi = -(-(distinct - out_lo) // chunk_tokens)
    j_lo = -(-(distinct - np.minimum(out_hi, distinct - 1)) // chunk_tokens)
    n_edges = np.where(has_runs, j_hi - j_lo + 2, 0)
    runs = max(1, int(n_edges.max()) - 1)
    step = np.arange(runs + 1)
    counts = j_hi[:, None] - step
    edges = law.first_l_out_at_least(distinct[:, None] - counts * chunk_tokens)
    # Runs past a B's own list are padded as empty (start 1, end 0, no chunks).
    real = step[None, :runs] < (n_edges - 1)[:, None]
    starts = np.where(real, np.maximum(lo[:, None], edges[:, :-1]), 1)
    ends = np.where(real, edges[:, 1:] - 1, 0)
    chunks = np.where(real, counts[:, :-1], 0)
    run_lo = starts[group].T  # shape (runs, K)
    run_hi = np.minimum(tops[None, :], ends[group].T)
    live = np.flatnonzero(run_lo <= run_hi)
    tail_lo = np.maximum(lo, law.first_l_out_at_least(distinct))[group]
    tails = tuple((i, int(tail_lo[i]), int(tops[i])) for i in np.flatnonzero(tail_lo <= tops).tolist())
    own_runs = np.maximum(n_edges - 1, 0)[group]
    alone_points = np.flatnonzero((np.bincount(group)[group] == 1) & (own_runs >= 3))
    alone = tuple((i, int(own_runs[i])) for i in alone_points.tolist())
    layout = _RunLayout(
        chunks=chunks[group].T.astype(np.float64),
        live=live,
        ends=np.concatenate((run_hi.ravel()[live], run_lo.ravel()[live] - 1)),
        tails=tails,
        alone=alone,
    )
    for array in (layout.chunks, layout.live, layout.ends):
        array.setflags(write=False)
    return layout


@dataclass(frozen=True, slots=True, kw_only=True)
class _Tabulation:
    """What a sweep reads of ``_LengthLaw``: the runs, and the running sums at every range end it sums to.

    Attributes:
        layout: where the compressed requests of each point lie.
        at_edges: running sums at 0 and at each CDF breakpoint, shape (9, buckets + 1).
        at_b: running sums at min(B, top) of each point, shape (9, K).
        at_tops: running sums at min(gamma*B, top) of each point, shape (9, K).
        at_ends: the rows ``_RUN_ROWS`` at ``layout.ends``, shape (3, len(ends)).
    """

    layout: _RunLayout
    at_edges: npt.NDArray[np.float64]
    at_b: npt.NDArray[np.float64]
    at_tops: npt.NDArray[np.float64]
    at_ends: npt.NDArray[np.float64]


@functools.lru_cache(maxsize=16)
def _tabulate(law: _LengthLaw, chunk_tokens: int, edges_bytes: bytes, b_bytes: bytes, tops_bytes: bytes) -> _Tabulation:
    """The run layout and the running sums of one sweep's points over one CDF's breakpoints (memoised).

    Nothing here depends on the CDF's fractions or on the arrival rate: successive snapshots with the
    same input share, breakpoints and points reuse it, and a new input share costs one tabulation
    of the law plus one sum up to the longest length read (``_running_at``).
    """
    edges = np.frombuffer(edges_bytes, dtype=np.int64)
    b_tokens = np.frombuffer(b_bytes, dtype=np.int64)
    tops = np.frombuffer(tops_bytes, dtype=np.int64)
    layout = _run_layout(law, chunk_tokens, b_tokens, tops)
    b_top = np.minimum(b_tokens, law.top_tokens)
    running = _running_at(law, np.concatenate((edges, b_top, tops, layout.ends)))
    b_at = edges.size
    tops_at = b_at + b_top.size
    ends_at = tops_at + tops.size
    tabulation = _Tabulation(
        layout=layout,
        at_edges=running[:, :b_at],
        at_b=running[:, b_at:tops_at],
        at_tops=running[:, tops_at:ends_at],
        at_ends=running[_RUN_ROWS, ends_at:],
    )
    for array in (tabulation.at_edges, tabulation.at_b, tabulation.at_tops, tabulation.at_ends):
        array.setflags(write=False)
    return tabulation


class ExactCalibrator:
    """Closed-form pool calibrations of one CDF for every (B_short, gamma) of a sweep at once.

    Each calibration is a handful of range sums over the CDF's buckets (``_WeightedSums``). All
    points of a sweep are columns of the same numpy expressions, so a whole sweep costs a fixed
    number of array passes of width (points) after a set-up that depends only on the CDF; the
    per-length tables behind it depend only on the input share and are memoised. Every column is
    computed by the same float operations, in the same order, as a point calibrated on its own.
    """

    def __init__(self, cdf: LengthCdf, params: FleetoptParams, *, input_frac: float) -> None:
        """Tabulate the length law of ``cdf``."""
        self._params = params
        self._input_frac = input_frac
        self._cdf = cdf
        self._top = cdf.max_tokens
        law = _length_law(input_frac, params.chunk_tokens, cdf.max_tokens)
        self._law = law
        self._edges_bytes = np.asarray((0, *cdf.tokens), dtype=np.int64).tobytes()
        self._n_long = slots_per_gpu(params.long_ctx_tokens, params)

    def pool_columns(
        self, b_tokens: npt.NDArray[np.int64], gamma_b_tokens: npt.NDArray[np.int64], p_c: float
    ) -> CalibrationColumns:
        """Short-pool then long-pool calibrations of each point (B_short, gamma*B): 2 K columns for K points.

        The short pool holds native L <= B plus compressed borderline requests (weight p_c); the
        long pool L > gamma*B plus borderline requests left uncompressed (weight 1 - p_c).
        Compressed requests are counted at L = B for the P99 prefill, an upper bound within one token.

        Args:
            b_tokens: B_short of each point, the short pool's context window.
            gamma_b_tokens: floor(gamma * B) of each point, each >= its B.
            p_c: effective compressibility of the borderline band.
        """
        top = self._top
        b_top = np.minimum(b_tokens, top)
        tops = np.minimum(gamma_b_tokens, top)
        tab = _tabulate(self._law, self._params.chunk_tokens, self._edges_bytes, b_tokens.tobytes(), tops.tobytes())
        sums = _WeightedSums(self._cdf, tab.at_edges)
        n_short = slots_per_gpu_columns(b_tokens, self._params)
        native = self._native(sums.prefix(b_top, tab.at_b), n_short)
        short = native.plus(self._compressed(sums, tab, b_tokens, n_short), p_c)
        # Suffix sums at B + 1 and at gamma*B + 1: the band is their difference, the rest lies above.
        ends = sums.suffix(np.concatenate((b_top + 1, tops + 1)), np.concatenate((tab.at_b, tab.at_tops), axis=1))
        at_b, at_top = ends[:, : b_top.size], ends[:, b_top.size :]
        band = self._native(at_b - at_top, self._n_long)
        above = self._native(at_top, self._n_long)
        long = above.plus(band, 1.0 - p_c)

        count = b_tokens.size
        cum = sums.cum_mass_columns(np.concatenate((b_top, tops)))
        short_target = PREFILL_QUANTILE_FRAC * short.mass
        band_mass = (1.0 - p_c) * band.mass
        long_target = PREFILL_QUANTILE_FRAC * long.mass
        in_band = long_target <= band_mass
        with np.errstate(divide="ignore", invalid="ignore"):
            # Only read where in_band, which needs band mass, hence p_c < 1.
            band_level = cum[:count] + long_target / (1.0 - p_c)
        level = np.where(in_band, band_level, cum[count:] + (long_target - band_mass))
        l99 = sums.quantile_columns(np.concatenate((short_target, np.where(long.mass > 0.0, level, 0.0))))
        short_l99 = np.minimum(np.where(short_target <= native.mass, l99[:count], b_tokens), b_tokens)
        both = _Moments(
            mass=np.concatenate((short.mass, long.mass)),
            s1=np.concatenate((short.s1, long.s1)),
            s2=np.concatenate((short.s2, long.s2)),
            pre=np.concatenate((short.pre, long.pre)),
        )
        n_slots = np.concatenate((n_short, np.full(count, self._n_long, dtype=np.int64)))
        return self._finish(both, n_slots, np.concatenate((short_l99, l99[count:])))

    def _native(self, rows: npt.NDArray[np.float64], n_slots: npt.NDArray[np.int64] | int) -> _Moments:
        """Moments of requests served as they are, from range row sums of shape (9, K), at n_max = n_slots."""
        p = self._params
        k_n = p.h_s_per_slot / p.calib_ctx_tokens * n_slots
        return _Moments(
            mass=rows[_MASS],
            s1=p.w_s * rows[_M] + k_n * rows[_LM],
            s2=p.w_s * p.w_s * rows[_M2] + 2.0 * p.w_s * k_n * rows[_LM2] + k_n * k_n * rows[_L2M2],
            pre=(p.w_s + p.h_s_per_slot) * rows[_CHUNKS],
        )

    def _compressed(
        self, sums: _WeightedSums, tab: _Tabulation, b_tokens: npt.NDArray[np.int64], n_slots: npt.NDArray[np.int64]
    ) -> _Moments:
        """Requests of original length B + 1 .. top compressed to B_short (Eq. 15), per point.

        Such a request keeps l_out and its prompt becomes max(1, B - l_out), so while l_out < B it
        holds S = (ceil((B - l_out) / C_chunk) + l_out) (W + H (B / C_calib) n): on each run of
        lengths with the same chunk count j that needs only sum w, sum w l_out and sum w l_out^2
        (where the runs lie does not depend on the CDF: ``_run_layout``). Outputs of B or more
        (possible only for gamma >= 1 / (1 - input_frac)) are summed length by length.
        """
        p = self._params
        layout = tab.layout
        # Range sums over the live (run, point) pairs; an empty run sums to exactly 0.
        ends_at = sums.prefix_runs(layout.ends, tab.at_ends)
        live = layout.live
        run_sums = np.zeros((len(_RUN_ROWS), layout.chunks.size), dtype=np.float64)
        run_sums[:, live] = ends_at[:, : live.size] - ends_at[:, live.size :]
        m0, m1, m2 = run_sums.reshape(len(_RUN_ROWS), *layout.chunks.shape)
        j = layout.chunks
        t_iter = p.w_s + p.h_s_per_slot * (b_tokens / p.calib_ctx_tokens) * n_slots
        prefill_s_per_chunk = p.w_s + p.h_s_per_slot
        mass = m0.sum(axis=0)
        s1 = t_iter * (j * m0 + m1).sum(axis=0)
        s2 = t_iter * t_iter * (j * j * m0 + 2.0 * j * m1 + m2).sum(axis=0)
        pre = prefill_s_per_chunk * (j * m0).sum(axis=0)
        for i, runs in layout.alone:
            # A B swept with one gamma only: per B, numpy sums its runs as one vector (first run, then a
            # pairwise sum of the rest), not run by run; that order is kept so the floats are the same.
            a0, a1, a2, ji = m0[:runs, i], m1[:runs, i], m2[:runs, i], j[:runs, i]
            mass[i] = a0.sum()
            s1[i] = t_iter[i] * (ji * a0 + a1).sum()
            s2[i] = t_iter[i] * t_iter[i] * (ji * ji * a0 + 2.0 * ji * a1 + a2).sum()
            pre[i] = prefill_s_per_chunk * (ji * a0).sum()
        for i, lo_i, hi_i in layout.tails:
            # The prompt is cut to one token: S = (1 + l_out) (W + H ((1 + l_out) / C_calib) n).
            w = sums.weights_of(np.arange(lo_i, hi_i + 1, dtype=np.int64))
            held = 1.0 + self._law.l_out_at(np.arange(lo_i, hi_i + 1, dtype=np.int64))
            service = held * (p.w_s + p.h_s_per_slot * (held / p.calib_ctx_tokens) * int(n_slots[i]))
            mass[i] += w.sum()
            s1[i] += (w * service).sum()
            s2[i] += (w * service * service).sum()
            pre[i] += prefill_s_per_chunk * w.sum()
        return _Moments(mass=mass, s1=s1, s2=s2, pre=pre)

    def _finish(
        self, moments: _Moments, n_slots: npt.NDArray[np.int64], l99_tokens: npt.NDArray[np.int64]
    ) -> CalibrationColumns:
        """The calibrations from each point's moments and P99 length; absent where the mass is 0."""
        p = self._params
        present = moments.mass > 0.0
        with np.errstate(divide="ignore", invalid="ignore"):
            e1 = moments.s1 / moments.mass
            e2 = moments.s2 / moments.mass
            cv2 = np.maximum(0.01, e2 / (e1 * e1) - 1.0)
            mu = n_slots / e1
            mean_prefill = moments.pre / moments.mass
        l_in = np.maximum(1, np.floor(self._input_frac * l99_tokens))
        first_decode = p.w_s + p.h_s_per_slot * (l99_tokens / p.calib_ctx_tokens) * n_slots
        overhead = np.ceil(l_in / p.chunk_tokens) * (p.w_s + p.h_s_per_slot) + first_decode
        return CalibrationColumns(
            present=present,
            n_slots=n_slots,
            mean_service_s=e1,
            cv2=cv2,
            mu_gpu_per_s=mu,
            mean_prefill_s=mean_prefill,
            ttft_overhead_s=overhead,
        )
