"""Slot-level M/G/c simulation of one FleetOpt pool, to check the planner's predicted utilisation.

Seed 002 section 7.3 (Table 5: analytic vs DES utilisation within 3 %); spec seed-002 section 4.5.
A pool of n GPUs is c = n * n_max KV slots. Requests arrive as a Poisson process at the pool's
rate, wait FCFS for the first free slot, and hold it for their service time S, drawn from the
same per-request model the planner calibrates on (Eqs. 3-4, the compressed prompt of Eq. 15).
TTFT is the queue wait plus the batch-1 prefill the planner budgets for.

``pool_requests`` draws (S, prefill) for the requests of one pool of a plan point, in either
planner mode: ``paper`` samples the reference's native CDF slices, ``exact`` the post-compression
mixture the exact mode calibrates on (spec section 2.7).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from policies.fleetopt import FleetoptInputs, FleetoptParams, LengthCdf, PlannerMode, slots_per_gpu
from schemas.errors import InvalidInputError

#: Share of requests simulated before measuring starts (the reference DES discards 20 %).
DEFAULT_WARMUP_FRAC = 0.2


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolRequests:
    """Per-request service and prefill times of one pool, shape (n,) each, in seconds."""

    service_s: npt.NDArray[np.float64]
    prefill_s: npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True, kw_only=True)
class SlotPoolResult:
    """What one simulated pool measured after the warm-up.

    Attributes:
        measured_requests: arrivals after the warm-up.
        util_frac: busy slot-seconds / (c * window) over the measured arrivals' time window.
        wait_prob_frac: share of measured arrivals that found every slot busy (Erlang-C's C).
        mean_wait_s: mean queue wait.
        p99_wait_s: 99th percentile queue wait.
        p99_ttft_s: 99th percentile of queue wait plus prefill.
    """

    measured_requests: int
    util_frac: float
    wait_prob_frac: float
    mean_wait_s: float
    p99_wait_s: float
    p99_ttft_s: float


def simulate_slot_pool(
    *,
    arrival_rate_per_s: float,
    c_slots: int,
    requests: PoolRequests,
    rng: np.random.Generator,
    warmup_frac: float = DEFAULT_WARMUP_FRAC,
) -> SlotPoolResult:
    """Run an FCFS M/G/c queue with c_slots servers over ``requests`` in order.

    Args:
        arrival_rate_per_s: Poisson arrival rate lambda_p of the pool, > 0.
        c_slots: servers c = n_gpus * n_max, >= 1.
        requests: service and prefill time of each arrival, in arrival order.
        rng: source of the inter-arrival times.
        warmup_frac: leading share of arrivals left out of every statistic, in [0, 1).

    Raises:
        InvalidInputError: on a non-positive rate or slot count, a bad warm-up share, or fewer
            than 10 measured requests.
    """
    n = requests.service_s.size
    if not arrival_rate_per_s > 0.0:
        msg = f"arrival_rate_per_s must be > 0, got {arrival_rate_per_s}"
        raise InvalidInputError(msg, field="arrival_rate_per_s", value=arrival_rate_per_s)
    if c_slots < 1:
        msg = f"c_slots must be >= 1, got {c_slots}"
        raise InvalidInputError(msg, field="c_slots", value=c_slots)
    if not 0.0 <= warmup_frac < 1.0:
        msg = f"warmup_frac must lie in [0, 1), got {warmup_frac}"
        raise InvalidInputError(msg, field="warmup_frac", value=warmup_frac)
    first = int(warmup_frac * n)
    if n - first < 10:
        msg = f"requests must leave at least 10 measured arrivals after the warm-up, got {n - first}"
        raise InvalidInputError(msg, field="requests", value=n)
    arrivals = np.cumsum(rng.exponential(1.0 / arrival_rate_per_s, size=n))
    residual_s = _equilibrium_residuals(arrival_rate_per_s, c_slots, requests.service_s, rng)
    starts = _fcfs_starts(arrivals.tolist(), requests.service_s.tolist(), c_slots, residual_s.tolist())
    waits = starts - arrivals
    # Busy slot-seconds inside the window [first measured arrival, last arrival], from every request.
    window_lo, window_hi = float(arrivals[first]), float(arrivals[-1])
    begins = np.concatenate((starts, np.zeros(residual_s.size)))
    ends = np.concatenate((starts + requests.service_s, residual_s))
    busy_s = np.clip(np.minimum(ends, window_hi) - np.maximum(begins, window_lo), 0.0, None).sum()
    measured = waits[first:]
    ttft = measured + requests.prefill_s[first:]
    return SlotPoolResult(
        measured_requests=n - first,
        util_frac=float(busy_s / (c_slots * (window_hi - window_lo))),
        wait_prob_frac=float(np.mean(measured > 0.0)),
        mean_wait_s=float(measured.mean()),
        p99_wait_s=float(np.percentile(measured, 99)),
        p99_ttft_s=float(np.percentile(ttft, 99)),
    )


def _equilibrium_residuals(
    arrival_rate_per_s: float, c_slots: int, service_s: npt.NDArray[np.float64], rng: np.random.Generator
) -> npt.NDArray[np.float64]:
    """Remaining service of the requests in service at time 0, so the run starts near steady state.

    A 64K pool holds requests for minutes, so 40k arrivals span only a few service times and an
    empty start would bias utilisation low for most of the run. In the many-server regime the
    occupancy is close to M/G/infinity's: Poisson(lambda E[S]) requests (capped at c), each with the
    equilibrium residual U * S of a length-biased S.
    """
    mean_s = float(service_s.mean())
    busy = min(c_slots, int(rng.poisson(arrival_rate_per_s * mean_s)))
    biased = rng.choice(service_s, size=busy, p=service_s / service_s.sum())
    return np.asarray(rng.random(busy) * biased, dtype=np.float64)


def _fcfs_starts(
    arrivals: list[float], service_s: list[float], c_slots: int, residual_s: list[float]
) -> npt.NDArray[np.float64]:
    """Service start of each arrival when it takes the slot that frees first (FCFS, identical slots).

    ``residual_s`` are the times at which the slots busy at time 0 free up; the others are free.
    """
    # n arrivals use at most the n slots that free first; a sorted list is already a heap.
    free_at = ([0.0] * (c_slots - len(residual_s)) + sorted(residual_s))[: min(c_slots, len(arrivals))]
    starts = []
    for arrival, service in zip(arrivals, service_s, strict=True):
        start = max(arrival, free_at[0])
        heapq.heapreplace(free_at, start + service)
        starts.append(start)
    return np.asarray(starts, dtype=np.float64)


def _segments(cdf: LengthCdf, lo_tokens: int, hi_tokens: int) -> list[tuple[int, int, float]]:
    """(first, last, mass) of each CDF bucket's integer lengths inside [lo, hi], uniform within a bucket."""
    out = []
    prev_t, prev_f = 0, 0.0
    for t, f in zip(cdf.tokens, cdf.frac, strict=True):
        first, last = max(prev_t + 1, lo_tokens), min(t, hi_tokens)
        if first <= last and f > prev_f:
            out.append((first, last, (f - prev_f) * (last - first + 1) / (t - prev_t)))
        prev_t, prev_f = t, f
    return out


def _reference_segments(cdf: LengthCdf, lo_tokens: int, pool_ctx_tokens: int) -> list[tuple[int, int, float]]:
    """The reference sampler's law on a CDF slice: a bucket keeps its whole mass however it is clamped.

    ``calibrate_paper`` picks a bucket by its mass, then L uniform on [max(lo, prev + 1), min(C_max, t)],
    or L = C_max when that is empty (spec section 2.3).
    """
    out = []
    prev_t, prev_f = 0, 0.0
    for t, f in zip(cdf.tokens, cdf.frac, strict=True):
        first, last = max(lo_tokens, prev_t + 1), min(pool_ctx_tokens, t)
        if f > prev_f:
            out.append((first, last, f - prev_f) if first <= last else (pool_ctx_tokens, pool_ctx_tokens, f - prev_f))
        prev_t, prev_f = t, f
    return out


def _draw(segments: list[tuple[int, int, float]], size: int, rng: np.random.Generator) -> npt.NDArray[np.int64]:
    """Lengths drawn from piecewise-uniform integer segments (first, last, mass)."""
    mass = np.asarray([m for _, _, m in segments], dtype=np.float64)
    pick = rng.choice(len(segments), size=size, p=mass / mass.sum())
    first = np.asarray([s[0] for s in segments], dtype=np.int64)[pick]
    last = np.asarray([s[1] for s in segments], dtype=np.int64)[pick]
    return rng.integers(first, last + 1)


def _times(
    l_in: npt.NDArray[np.int64], l_out: npt.NDArray[np.int64], n_slots: int, params: FleetoptParams
) -> PoolRequests:
    """Eqs. 3-4 per request (``calibration.service_time_s`` and ``prefill_s``, vectorised)."""
    chunks = np.ceil(l_in / params.chunk_tokens)
    t_iter = params.w_s + params.h_s_per_slot * ((l_in + l_out) / params.calib_ctx_tokens) * n_slots
    return PoolRequests(
        service_s=np.asarray((chunks + l_out) * t_iter, dtype=np.float64),
        prefill_s=np.asarray(chunks * (params.w_s + params.h_s_per_slot), dtype=np.float64),
    )


def _split(total: npt.NDArray[np.int64], input_frac: float) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """``calibration.split_tokens`` vectorised: l_in = max(1, floor(f L)), l_out = max(1, L - l_in)."""
    l_in = np.maximum(1, np.floor(input_frac * total).astype(np.int64))
    return l_in, np.maximum(1, total - l_in)


def pool_requests(
    inputs: FleetoptInputs,
    params: FleetoptParams,
    *,
    b_short_tokens: int,
    gamma_b_tokens: int,
    long_pool: bool,
    size: int,
    rng: np.random.Generator,
) -> PoolRequests:
    """Draw ``size`` requests of one pool of the plan point (B, gamma*B) as the planner models them.

    Paper mode: the short pool samples the breakpoints <= B renormalised, the long pool those
    above gamma*B from L = gamma*B (the reference's slices, spec section 2.3). Exact mode: the short
    pool serves native L <= B and, with weight p_c, borderline L in (B, gamma*B] compressed to a
    prompt of max(1, B - l_out); the long pool serves L > gamma*B and, with weight 1 - p_c, the
    uncompressed borderline requests.

    Raises:
        InvalidInputError: when the pool receives no traffic under this law.
    """
    cdf, b, gb = inputs.cdf, b_short_tokens, gamma_b_tokens
    n_slots = slots_per_gpu(params.long_ctx_tokens if long_pool else b, params)
    if params.mode is PlannerMode.PAPER:
        sliced = cdf.long_slice(gb) if long_pool else cdf.short_slice(b)
        lo_tokens = max(1, gb) if long_pool else 1
        ctx_tokens = params.long_ctx_tokens if long_pool else b
        segments = [] if sliced is None else _reference_segments(sliced, lo_tokens, ctx_tokens)
        compressed: list[tuple[int, int, float]] = []
    elif long_pool:
        band = [(lo, hi, (1.0 - inputs.p_c) * m) for lo, hi, m in _segments(cdf, b + 1, gb)]
        segments = _segments(cdf, gb + 1, cdf.max_tokens) + band
        compressed = []
    else:
        segments = _segments(cdf, 1, b)
        compressed = [(lo, hi, inputs.p_c * m) for lo, hi, m in _segments(cdf, b + 1, gb)]
    everything = [s for s in segments + compressed if s[2] > 0.0]
    if not everything:
        msg = f"the {'long' if long_pool else 'short'} pool receives no traffic at B={b}, gamma*B={gb}"
        raise InvalidInputError(msg, field="long_pool", value=long_pool)
    total = _draw(everything, size, rng)
    # Only the exact short pool holds lengths above B, and each of them was compressed.
    is_compressed = (total > b) if params.mode is PlannerMode.EXACT and not long_pool else np.zeros(size, dtype=bool)
    l_in, l_out = _split(total, inputs.input_frac)
    l_in = np.where(is_compressed, np.maximum(1, b - l_out), l_in)
    return _times(l_in, l_out, n_slots, params)
