"""EB+ IFR threshold correction Delta_theta for a linear hazard h(t) = p0 + eta t (Eq. 5, Thm. 3.2).

Delta_theta = eta (1 - theta0)^2 / (p0^2 theta0) * [zeta (theta0 / (1 - theta0) - zeta / 2) + rho (zeta - theta0)],
with zeta = -ln(1 - theta0) and rho = beta_d N / alpha_d (specs/seed-001-ebplus.md section 2.3). The
first bracketed term is the duration effect, the second the per-token-cost effect; both are
positive when theta0 solves Eq. 3, so Delta_theta > 0 for every eta > 0.
"""

from __future__ import annotations

import math

from schemas.errors import InvalidInputError


def delta_theta(
    *, theta0: float, p0: float, eta: float, alpha_d_s: float, beta_d_s_per_seq: float, n_seqs: float
) -> float:
    """Return the first-order IFR correction Delta_theta of Eq. 5 (uncapped).

    Args:
        theta0: base threshold from Eq. 3, in (0, 1).
        p0: hazard intercept, per output token, > 0.
        eta: hazard slope, per token squared, >= 0 (0 gives 0).
        alpha_d_s: decode-iteration fixed cost, seconds, > 0.
        beta_d_s_per_seq: decode cost per running sequence, seconds, >= 0.
        n_seqs: batch size N used in rho = beta_d N / alpha_d (Algorithm 1 passes the previous N-hat).

    Returns:
        Delta_theta, >= 0.

    Raises:
        InvalidInputError: on a value outside the ranges above.
    """
    if not 0.0 < theta0 < 1.0:
        msg = f"theta0 must lie in (0, 1), got {theta0}"
        raise InvalidInputError(msg, field="theta0", value=theta0)
    checks = (
        ("p0", p0, p0 > 0.0),
        ("eta", eta, eta >= 0.0),
        ("alpha_d_s", alpha_d_s, alpha_d_s > 0.0),
        ("beta_d_s_per_seq", beta_d_s_per_seq, beta_d_s_per_seq >= 0.0),
        ("n_seqs", n_seqs, n_seqs >= 1.0),
    )
    for name, value, ok in checks:
        if not (math.isfinite(value) and ok):
            msg = f"{name} out of range for Eq. 5, got {value}"
            raise InvalidInputError(msg, field=name, value=value)
    zeta = -math.log1p(-theta0)
    rho = beta_d_s_per_seq * n_seqs / alpha_d_s
    duration_effect = zeta * (theta0 / (1.0 - theta0) - 0.5 * zeta)
    per_token_cost_effect = rho * (zeta - theta0)
    return eta * (1.0 - theta0) ** 2 / (p0 * p0 * theta0) * (duration_effect + per_token_cost_effect)
