"""EB+ base switching threshold theta0 under a constant hazard (Eq. 3, Prop. 3.1).

theta0 is the unique root in (0, 1) of Psi(theta) = theta / (1 - theta) + ln(1 - theta) = gamma,
with gamma = p0 * alpha_p / alpha_d (specs/seed-001-ebplus.md section 2.2). Psi is increasing from
Psi(0+) = 0 to Psi(1-) = +inf, so bisection on (0, 1) always converges; theta0 therefore depends on
p0, alpha_p and alpha_d only through gamma, and not on N, mu_L, beta_p or beta_d.

Deviation: the reference code bisects on [0.001, 0.999] for 100 iterations and returns 0.01 when
gamma <= 1e-6. We bisect on the open interval (0, 1) to a tolerance of 1e-12 for every gamma > 0,
so that theta0 is exact for small gamma (theta0 ~ sqrt(2 gamma)); Algorithm 1's clip to
[theta_min, theta_max] (online_update.py) then plays the role of the code's floor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from schemas.errors import InvalidInputError

_BISECTION_TOL = 1e-12
_BISECTION_MAX_ITER = 200


def psi(theta: float) -> float:
    """Left-hand side of Eq. 3: Psi(theta) = theta / (1 - theta) + ln(1 - theta), for theta in (0, 1)."""
    return theta / (1.0 - theta) + math.log1p(-theta)


def solve_theta0(gamma: float) -> float:
    """Solve Eq. 3 for theta0 by bisection.

    Args:
        gamma: the dimensionless ratio p0 * alpha_p / alpha_d; must be finite and > 0.

    Returns:
        theta0 in (0, 1), accurate to 1e-12.

    Raises:
        InvalidInputError: when gamma is not finite or not > 0.
    """
    if not math.isfinite(gamma) or gamma <= 0.0:
        msg = f"gamma must be finite and > 0, got {gamma}"
        raise InvalidInputError(msg, field="gamma", value=gamma)
    lo, hi = 0.0, 1.0
    for _ in range(_BISECTION_MAX_ITER):
        mid = 0.5 * (lo + hi)
        if psi(mid) < gamma:
            lo = mid
        else:
            hi = mid
        if hi - lo < _BISECTION_TOL:
            break
    return 0.5 * (lo + hi)


@dataclass(frozen=True, slots=True, kw_only=True)
class BaseThreshold:
    """theta0 with the quantities Eq. 3 was solved from, kept for the decision's diagnostics.

    Attributes:
        gamma: p0 * alpha_p / alpha_d (dimensionless).
        theta0: the root of Eq. 3, in (0, 1).
        zeta: -ln(1 - theta0), > 0.
    """

    gamma: float
    theta0: float
    zeta: float


def base_threshold(*, p0: float, alpha_p_s: float, alpha_d_s: float) -> BaseThreshold:
    """Return theta0 of Eq. 3 for hazard p0 (per token) and fixed costs alpha_p_s, alpha_d_s (seconds).

    Raises:
        InvalidInputError: when p0, alpha_p_s or alpha_d_s is not finite and > 0.
    """
    for name, value in (("p0", p0), ("alpha_p_s", alpha_p_s), ("alpha_d_s", alpha_d_s)):
        if not math.isfinite(value) or value <= 0.0:
            msg = f"{name} must be finite and > 0, got {value}"
            raise InvalidInputError(msg, field=name, value=value)
    gamma = p0 * alpha_p_s / alpha_d_s
    theta0 = solve_theta0(gamma)
    return BaseThreshold(gamma=gamma, theta0=theta0, zeta=-math.log1p(-theta0))
