"""GPU-count inversion of the P99 wait with the utilisation cap (Eq. 11, Appendix A).

Seed 002 sections 3.3 and 6 ("Erlang-C inversion"); spec seed-002 section 1.8. A pool of n GPUs
has c = n * n_max slots; the smallest n with W99 <= the wait budget is found by galloping and
bisection (W99 is non-increasing in n), then raised to ceil(a / rho_max), a = lambda / mu_gpu.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from policies.fleetopt.calibration import CalibrationColumns, PoolCalibration
from policies.fleetopt.erlang import p99_wait_s, wait_within_columns
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


@dataclass(frozen=True, slots=True, kw_only=True)
class SizingColumns:
    """``PoolSizing`` of one pool kind for many sweep points, one column per point."""

    n_gpus: npt.NDArray[np.int64]
    arrival_rate_per_s: npt.NDArray[np.float64]
    util_frac: npt.NDArray[np.float64]
    p99_wait_s: npt.NDArray[np.float64]
    p99_ttft_s: npt.NDArray[np.float64]
    slo_met: npt.NDArray[np.bool_]

    def at(self, index: int) -> PoolSizing:
        """Column ``index`` as an object."""
        return PoolSizing(
            n_gpus=self.n_gpus.item(index),
            arrival_rate_per_s=self.arrival_rate_per_s.item(index),
            util_frac=self.util_frac.item(index),
            p99_wait_s=self.p99_wait_s.item(index),
            p99_ttft_s=self.p99_ttft_s.item(index),
            slo_met=self.slo_met.item(index),
        )

    def columns(self, start: int, stop: int) -> SizingColumns:
        """Columns start..stop - 1 (views)."""
        return SizingColumns(
            n_gpus=self.n_gpus[start:stop],
            arrival_rate_per_s=self.arrival_rate_per_s[start:stop],
            util_frac=self.util_frac[start:stop],
            p99_wait_s=self.p99_wait_s[start:stop],
            p99_ttft_s=self.p99_ttft_s[start:stop],
            slo_met=self.slo_met[start:stop],
        )

    def all(self) -> list[PoolSizing]:
        """Every column as an object, with one array-to-list conversion per field."""
        fields = zip(
            self.n_gpus.tolist(),
            self.arrival_rate_per_s.tolist(),
            self.util_frac.tolist(),
            self.p99_wait_s.tolist(),
            self.p99_ttft_s.tolist(),
            self.slo_met.tolist(),
            strict=True,
        )
        return [
            PoolSizing(n_gpus=n, arrival_rate_per_s=lam, util_frac=u, p99_wait_s=w, p99_ttft_s=t, slo_met=ok)
            for n, lam, u, w, t, ok in fields
        ]


@dataclass(frozen=True, slots=True, kw_only=True)
class _Queues:
    """What ``_wait_s`` reads of each pool being sized, one column per pool."""

    arrival_rate_per_s: npt.NDArray[np.float64]
    n_slots: npt.NDArray[np.int64]
    mu_slot_per_s: npt.NDArray[np.float64]
    cv2: npt.NDArray[np.float64]
    budget_s: npt.NDArray[np.float64]

    def feasible(
        self, at: npt.NDArray[np.intp] | slice, n_gpus: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
        """At n_gpus for pools ``at``: ``_wait_s(n) <= budget``, whether numpy's rounding leaves that in
        doubt, and whether W99 is certainly 0."""
        slots = self.n_slots[at]
        return wait_within_columns(
            (n_gpus * slots).astype(np.float64),
            self.arrival_rate_per_s[at],
            self.mu_slot_per_s[at],
            self.cv2[at],
            self.budget_s[at],
        )


def _first_feasible_columns(
    n_lo: npt.NDArray[np.int64], queues: _Queues
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """``_first_feasible`` of every column in lockstep: the same probes (gallop from n_lo, then bisection).

    Returns the GPU counts, whether W99 is certainly 0 there, and the columns to size with the
    scalar search instead: those where a probe's verdict was in doubt or the gallop passed
    ``EXACT_SEARCH_LIMIT_GPUS``. Every other column saw the verdicts the scalar search sees, so it
    ends on the same count.
    """
    ok, doubtful, zero = queues.feasible(slice(None), n_lo)
    searching = ~ok & ~doubtful
    bad, good, step = n_lo.copy(), n_lo.copy(), np.ones(n_lo.size, dtype=np.int64)
    galloping = searching.copy()
    while galloping.any():
        at = np.flatnonzero(galloping)
        trial = bad[at] + step[at]
        past = trial > EXACT_SEARCH_LIMIT_GPUS
        ok, doubt, zero_at = queues.feasible(at, np.minimum(trial, EXACT_SEARCH_LIMIT_GPUS))
        doubt |= past
        doubtful[at] |= doubt
        found, missed = ok & ~doubt, ~ok & ~doubt
        good[at[found]] = trial[found]
        zero[at[found]] = zero_at[found]
        bad[at[missed]] = trial[missed]
        step[at[missed]] *= 2
        galloping[at[~missed]] = False
    bisecting = searching & ~doubtful & (good - bad > 1)
    while bisecting.any():
        at = np.flatnonzero(bisecting)
        mid = (bad[at] + good[at]) // 2
        ok, doubt, zero_at = queues.feasible(at, mid)
        doubtful[at] |= doubt
        found, missed = ok & ~doubt, ~ok & ~doubt
        good[at[found]] = mid[found]
        zero[at[found]] = zero_at[found]
        bad[at[missed]] = mid[missed]
        bisecting = searching & ~doubtful & (good - bad > 1)
    return good, zero, doubtful


def size_pool_columns(
    arrival_rate_per_s: npt.NDArray[np.float64], calib: CalibrationColumns, params: FleetoptParams
) -> SizingColumns:
    """Exact-mode ``size_pool`` of every column, a pool being empty where it has no calibration or a trickle.

    The search of ``_search`` (from n0 = max(ceil(a / rho_max), floor(a) + 1), galloping then
    bisecting) runs on all columns at once with W99 evaluated in numpy. With thousands of KV slots
    per pool it mostly ends at n0 because the Erlang-C probability is provably below 1 %
    (``erlang.rare_wait_columns``). W99 at the final count is 0 where that is certain and the
    scalar ``p99_wait_s`` otherwise; a column whose verdict ``W99 <= budget`` numpy's rounding
    could have flipped goes through the scalar ``size_pool``. So every column is exactly what
    ``size_pool`` returns for it.
    """
    lam = arrival_rate_per_s
    sized = calib.present & (lam > params.min_pool_rate_per_s)
    trickle = lam <= params.min_pool_rate_per_s
    n_gpus = np.zeros(lam.size, dtype=np.int64)
    util = np.zeros(lam.size, dtype=np.float64)
    wait = np.where(trickle, 0.0, math.inf)
    ttft = wait.copy()
    slo_met = trickle.copy()
    idx = np.flatnonzero(sized)
    lam_s, mu_gpu, slots = lam[idx], calib.mu_gpu_per_s[idx], calib.n_slots[idx]
    n_cap = np.ceil(lam_s / (mu_gpu * params.rho_max))
    n0 = np.maximum(np.maximum(1.0, n_cap), np.floor(lam_s / mu_gpu) + 1.0)
    overhead_s = calib.ttft_overhead_s[idx]
    queues = _Queues(
        arrival_rate_per_s=lam_s,
        n_slots=slots,
        mu_slot_per_s=mu_gpu / slots,
        cv2=calib.cv2[idx],
        budget_s=np.maximum(0.0, params.t_slo_s - overhead_s),
    )
    within = n0 <= EXACT_SEARCH_LIMIT_GPUS
    n_found, zero, doubtful = _first_feasible_columns(np.minimum(n0, EXACT_SEARCH_LIMIT_GPUS).astype(np.int64), queues)
    fast = within & ~doubtful
    at, n_fast = idx[fast], n_found[fast]
    n_gpus[at] = n_fast
    util[at] = lam_s[fast] / (n_fast * mu_gpu[fast])
    wait[at] = 0.0
    for i in at[~zero[fast]].tolist():
        wait[i] = p99_wait_s(
            int(n_gpus[i] * calib.n_slots[i]),
            float(lam[i]),
            float(calib.mu_gpu_per_s[i] / calib.n_slots[i]),
            float(calib.cv2[i]),
        )
    ttft[at] = wait[at] + overhead_s[fast]
    slo_met[at] = ttft[at] <= params.t_slo_s
    for i in idx[~fast].tolist():
        pool = size_pool(float(lam[i]), calib.at(i), params)
        n_gpus[i], util[i], wait[i], ttft[i], slo_met[i] = (
            pool.n_gpus,
            pool.util_frac,
            pool.p99_wait_s,
            pool.p99_ttft_s,
            pool.slo_met,
        )
    return SizingColumns(
        n_gpus=n_gpus, arrival_rate_per_s=lam, util_frac=util, p99_wait_s=wait, p99_ttft_s=ttft, slo_met=slo_met
    )
