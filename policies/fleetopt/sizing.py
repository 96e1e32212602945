"""GPU-count inversion of the P99 wait with the utilisation cap (Eq. 11, Appendix A).

Seed 002 sections 3.3 and 6 ("Erlang-C inversion"); spec seed-002 section 1.8. A pool of n GPUs
has c = n * n_max slots; the smallest n with W99 <= the wait budget is found by galloping and
bisection (W99 is non-increasing in n), then raised to ceil(a / rho_max), a = lambda / mu_gpu.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from policies.fleetopt.calibration import PoolCalibration
from policies.fleetopt.erlang import p99_wait_s
from policies.fleetopt.params import FleetoptParams, PlannerMode

#: Exact mode gives up past this many GPUs per pool (a wait budget no fleet can meet).
EXACT_SEARCH_LIMIT_GPUS = 10_000_000


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolSizing:
    """A sized pool and what the model predicts for it.

    Attributes:
        n_gpus: GPUs of the pool (0 when it receives no traffic).
        arrival_rate_per_s: lambda_p.
        util_frac: predicted utilisation lambda_p / (n mu_gpu) (Table 5's rho_ana); 0 for an empty pool.
        p99_wait_s: predicted P99 queue wait W99 (Eq. 6).
        p99_ttft_s: W99 plus the calibration's TTFT overhead.
        slo_met: p99_ttft_s <= T_slo.
    """

    n_gpus: int
    arrival_rate_per_s: float
    util_frac: float
    p99_wait_s: float
    p99_ttft_s: float
    slo_met: bool


def _wait_s(n_gpus: int, arrival_rate_per_s: float, calib: PoolCalibration) -> float:
    mu_slot = calib.mu_gpu_per_s / calib.n_slots
    return p99_wait_s(n_gpus * calib.n_slots, arrival_rate_per_s, mu_slot, calib.cv2)


def _first_feasible(
    n_lo: int, budget_s: float, arrival_rate_per_s: float, calib: PoolCalibration, limit: int
) -> tuple[int, float]:
    """Smallest n >= n_lo with W99(n) <= budget_s and W99 there, or (limit + 1, inf) when none up to limit."""
    wait_lo = _wait_s(n_lo, arrival_rate_per_s, calib)
    if wait_lo <= budget_s:
        return n_lo, wait_lo
    bad, step = n_lo, 1
    while True:
        good = bad + step
        if good > limit:
            wait_limit = _wait_s(limit, arrival_rate_per_s, calib)
            if wait_limit > budget_s:
                return limit + 1, math.inf
            good, wait_good = limit, wait_limit
            break
        wait_good = _wait_s(good, arrival_rate_per_s, calib)
        if wait_good <= budget_s:
            break
        bad, step = good, step * 2
    while good - bad > 1:
        mid = (bad + good) // 2
        wait_mid = _wait_s(mid, arrival_rate_per_s, calib)
        if wait_mid <= budget_s:
            good, wait_good = mid, wait_mid
        else:
            bad = mid
    return good, wait_good


def _search(arrival_rate_per_s: float, calib: PoolCalibration, params: FleetoptParams) -> tuple[int, float | None]:
    """``min_gpus`` and W99 at that count when the search already evaluated it (None otherwise)."""
    if arrival_rate_per_s <= 0.0:
        return 1, None
    a_gpus = arrival_rate_per_s / calib.mu_gpu_per_s
    n_cap = math.ceil(arrival_rate_per_s / (calib.mu_gpu_per_s * params.rho_max))
    if params.mode is PlannerMode.PAPER:
        n0 = max(1, math.ceil(a_gpus) + 1)
        n_first, wait = _first_feasible(n0, params.t_slo_s, arrival_rate_per_s, calib, max(n0, params.max_search_gpus))
        if n_first > n0 and n_first > params.max_search_gpus:
            return max(n0 + 1, params.max_search_gpus + 1), None
        return (n_first, wait) if n_first >= n_cap else (n_cap, None)
    budget_s = max(0.0, params.t_slo_s - calib.ttft_overhead_s)
    n0 = max(1, n_cap, math.floor(a_gpus) + 1)
    n_first, wait = _first_feasible(n0, budget_s, arrival_rate_per_s, calib, EXACT_SEARCH_LIMIT_GPUS)
    return n_first, wait if n_first <= EXACT_SEARCH_LIMIT_GPUS else None


def min_gpus(arrival_rate_per_s: float, calib: PoolCalibration, params: FleetoptParams) -> int:
    """Smallest GPU count meeting the wait budget and the utilisation cap (Eq. 11).

    Paper mode returns exactly what the reference's linear search does: start at
    ceil(a) + 1, stop at the first n with W99 <= T_slo (or return n once it passes
    ``max_search_gpus``), then take max(n, ceil(a / rho_max)). Exact mode starts at
    ceil(a / rho_max) and budgets T_slo minus the calibration's TTFT overhead (Eq. 8); when that
    budget is not positive the queue must not wait at all at the 99th percentile (W99 = 0).

    Deviation: exact mode drops the reference's "+1" floor and its 5000-GPU cap (spec section 1.8).

    Args:
        arrival_rate_per_s: lambda_p of the pool.
        calib: the pool's calibration.
        params: planner parameters (mode, T_slo, rho_max, search cap).

    Returns:
        GPUs for the pool, >= 1.
    """
    return _search(arrival_rate_per_s, calib, params)[0]


def size_pool(arrival_rate_per_s: float, calib: PoolCalibration, params: FleetoptParams) -> PoolSizing:
    """``evaluate_pool(min_gpus(...))`` in one pass: W99 at the chosen count is reused from the search."""
    n_gpus, wait_s = _search(arrival_rate_per_s, calib, params)
    return _predict(n_gpus, arrival_rate_per_s, calib, params, wait_s)


def evaluate_pool(
    n_gpus: int, arrival_rate_per_s: float, calib: PoolCalibration | None, params: FleetoptParams
) -> PoolSizing:
    """Predictions for a pool of ``n_gpus`` (sized here or held by hysteresis); ``calib`` None for an empty pool."""
    return _predict(n_gpus, arrival_rate_per_s, calib, params, None)


def _predict(
    n_gpus: int, arrival_rate_per_s: float, calib: PoolCalibration | None, params: FleetoptParams, wait_s: float | None
) -> PoolSizing:
    """``evaluate_pool`` with W99 at ``n_gpus`` when the caller already has it."""
    if n_gpus <= 0 or arrival_rate_per_s <= 0.0 or calib is None:
        # A pool below min_pool_rate_per_s is dropped (the reference's cut-off): its few requests
        # are not counted against the SLO, as in the reference.
        empty_ok = arrival_rate_per_s <= params.min_pool_rate_per_s
        wait = 0.0 if empty_ok else math.inf
        return PoolSizing(
            n_gpus=max(0, n_gpus),
            arrival_rate_per_s=arrival_rate_per_s,
            util_frac=0.0,
            p99_wait_s=wait,
            p99_ttft_s=wait,
            slo_met=empty_ok,
        )
    wait = _wait_s(n_gpus, arrival_rate_per_s, calib) if wait_s is None else wait_s
    ttft = wait + calib.ttft_overhead_s
    return PoolSizing(
        n_gpus=n_gpus,
        arrival_rate_per_s=arrival_rate_per_s,
        util_frac=arrival_rate_per_s / (n_gpus * calib.mu_gpu_per_s),
        p99_wait_s=wait,
        p99_ttft_s=ttft,
        slo_met=ttft <= params.t_slo_s,
    )
