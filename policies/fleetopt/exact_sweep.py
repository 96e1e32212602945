"""Algorithm 1 in exact mode as columns: every (B, gamma) point of a sweep in one set of numpy passes.

Seed 002 section 6 (Algorithm 1) claims a full sweep in under a millisecond. Point by point, Python
spends tens of microseconds on each of the ~140 points (objects, scalar calls), so here every
quantity of a point (Eqs. 1-2 and 14 for the split, the calibration, Eq. 11 for the sizing, Eq. 9
for the cost) is one element of an array with one column per point. Each column is computed by
the same float operations, in the same order, as the scalar functions (``split_traffic``,
``ExactCalibrator``, ``size_pool``), so the results are those of a point evaluated on its own,
bit for bit; ``sweep.py`` turns columns into ``PlanPoint`` objects only when they are read.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from policies.fleetopt.calibration import CalibrationColumns, ExactCalibrator
from policies.fleetopt.cdf import LengthCdf
from policies.fleetopt.inputs import FleetoptInputs
from policies.fleetopt.params import FleetoptParams
from policies.fleetopt.sizing import SizingColumns, size_pool_columns


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepColumns:
    """Every field of each point's ``PlanPoint``, one column per point (``RoutingSplit`` fields first).

    The homogeneous fleet, when asked for, is the last column.
    """

    b_short_tokens: npt.NDArray[np.int64]
    gamma: npt.NDArray[np.float64]
    gamma_b_tokens: npt.NDArray[np.int64]
    alpha: npt.NDArray[np.float64]
    beta: npt.NDArray[np.float64]
    alpha_prime: npt.NDArray[np.float64]
    short_rate_per_s: npt.NDArray[np.float64]
    long_rate_per_s: npt.NDArray[np.float64]
    short_calib: CalibrationColumns
    long_calib: CalibrationColumns
    short: SizingColumns
    long: SizingColumns
    cost_usd_per_hr: npt.NDArray[np.float64]
    slo_met: npt.NDArray[np.bool_]

    @property
    def size(self) -> int:
        """Number of points (columns)."""
        return int(self.b_short_tokens.size)

    def cheapest(self) -> int:
        """Column of the cheapest SLO-feasible point, the first on ties; of the cheapest overall when none is."""
        cost = np.where(self.slo_met, self.cost_usd_per_hr, np.inf) if self.slo_met.any() else self.cost_usd_per_hr
        return int(np.argmin(cost))


def cdf_at_columns(cdf: LengthCdf, x_tokens: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
    """``LengthCdf.at`` of each x, by the same interpolation in the same order."""
    tokens = np.asarray(cdf.tokens, dtype=np.int64)
    frac = np.asarray(cdf.frac, dtype=np.float64)
    prev_t = np.concatenate(([0], tokens))
    prev_f = np.concatenate(([0.0], frac))
    k = np.searchsorted(tokens, x_tokens, side="left")
    inside = np.minimum(k, tokens.size - 1)
    f, pf = frac[inside], prev_f[inside]
    value = pf + (f - pf) * (x_tokens - prev_t[inside]) / (tokens[inside] - prev_t[inside])
    at: npt.NDArray[np.float64] = np.where(x_tokens <= 0, 0.0, np.where(k == tokens.size, 1.0, value))
    return at


@dataclass(frozen=True, slots=True, kw_only=True)
class _RateFree:
    """What a sweep computes before the arrival rate enters: the points, their shares and calibrations.

    ``calibs`` holds the short pools' columns then the long pools'. The arrays are read-only: they
    are shared by every sweep of the same CDF, p_c, input share and parameters.
    """

    b_short_tokens: npt.NDArray[np.int64]
    gamma: npt.NDArray[np.float64]
    gamma_b_tokens: npt.NDArray[np.int64]
    alpha: npt.NDArray[np.float64]
    beta: npt.NDArray[np.float64]
    alpha_prime: npt.NDArray[np.float64]
    calibs: CalibrationColumns


@functools.lru_cache(maxsize=16)
def _rate_free(
    cdf: LengthCdf,
    p_c: float,
    input_frac: float,
    params: FleetoptParams,
    *,
    b_short_tokens: tuple[int, ...],
    homogeneous: bool,
) -> _RateFree:
    """Splits (Eqs. 1-2 and 14, as split_traffic) and calibrations of every point; none depends on lambda.

    Memoised: successive snapshots that differ only in their arrival rate reuse them.
    """
    ctx = params.long_ctx_tokens
    grid = len(params.gammas)
    points = len(b_short_tokens) * grid
    count = points + 1 if homogeneous else points
    b = np.full(count, ctx, dtype=np.int64)
    b[:points] = np.repeat(np.asarray(b_short_tokens, dtype=np.int64), grid)
    gamma = np.ones(count, dtype=np.float64)
    gamma[:points] = params.gammas * len(b_short_tokens)
    # floor(gamma * B), alpha = F(B), beta = F(gamma B) - F(B), alpha' = min(1, alpha + beta p_c).
    gamma_b = (gamma * b).astype(np.int64)
    at = cdf_at_columns(cdf, np.concatenate((b, gamma_b)))
    alpha = at[:count]
    beta = np.maximum(0.0, at[count:] - alpha)
    alpha_prime = np.minimum(1.0, alpha + beta * p_c)
    if homogeneous:
        # The baseline sends everything to its one pool (seed 002 section 7.1), whatever F says.
        alpha[-1], beta[-1], alpha_prime[-1] = 1.0, 0.0, 1.0
    calibs = ExactCalibrator(cdf, params, input_frac=input_frac).pool_columns(b, gamma_b, p_c)
    shared = (
        b,
        gamma,
        gamma_b,
        alpha,
        beta,
        alpha_prime,
        *(getattr(calibs, f.name) for f in dataclasses.fields(calibs)),
    )
    for array in shared:
        array.setflags(write=False)
    return _RateFree(
        b_short_tokens=b,
        gamma=gamma,
        gamma_b_tokens=gamma_b,
        alpha=alpha,
        beta=beta,
        alpha_prime=alpha_prime,
        calibs=calibs,
    )


def sweep_columns(
    inputs: FleetoptInputs, params: FleetoptParams, b_short_tokens: tuple[int, ...], *, homogeneous: bool
) -> SweepColumns:
    """The points (B, gamma) for B in ``b_short_tokens`` (B outer, gamma in grid order), then the baseline.

    Args:
        inputs: the estimate snapshot.
        params: planner parameters (exact mode).
        b_short_tokens: the B values to sweep.
        homogeneous: append the single pool of C_max^(l) serving every request (seed 002 section 7.1).
    """
    free = _rate_free(
        inputs.cdf, inputs.p_c, inputs.input_frac, params, b_short_tokens=b_short_tokens, homogeneous=homogeneous
    )
    lam = inputs.arrival_rate_per_s
    count = free.b_short_tokens.size
    short_rate = free.alpha_prime * lam
    long_rate = (1.0 - free.alpha_prime) * lam
    # Both pools in one set of columns, short then long; the long pool is dropped below the
    # reference's cut-off rate: no calibration, no GPUs.
    keep = np.concatenate((np.ones(count, dtype=np.bool_), long_rate > params.min_pool_rate_per_s))
    calibs = dataclasses.replace(free.calibs, present=free.calibs.present & keep)
    sized = size_pool_columns(np.concatenate((short_rate, long_rate)), calibs, params)
    short, long = sized.columns(0, count), sized.columns(count, 2 * count)
    return SweepColumns(
        b_short_tokens=free.b_short_tokens,
        gamma=free.gamma,
        gamma_b_tokens=free.gamma_b_tokens,
        alpha=free.alpha,
        beta=free.beta,
        alpha_prime=free.alpha_prime,
        short_rate_per_s=short_rate,
        long_rate_per_s=long_rate,
        short_calib=calibs.columns(0, count),
        long_calib=calibs.columns(count, 2 * count),
        short=short,
        long=long,
        cost_usd_per_hr=short.n_gpus * params.short_cost_usd_per_hr + long.n_gpus * params.long_cost_usd_per_hr,
        slo_met=short.slo_met & long.slo_met,
    )
