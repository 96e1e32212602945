"""EB+ online joint adaptation of (k*, N*): one Algorithm 1 update (paper Section 3.4, App. D.7).

Given the fitted hazard (p0, eta), mean prompt length mu_L and the cost model: theta0 from Eq. 3,
Delta_theta from Eq. 5 evaluated at the previous cycle's N-hat (the paper's one-step fixed point),
theta* = clip(theta0 + Delta_theta, theta_min, theta_max), an EMA on theta*, N* from Eq. 6 (or the CLT
variant) at the smoothed theta, clamped to [n_min, max_num_seqs], and k* = max(1, floor(theta N)).
specs/seed-001-ebplus.md sections 3.1-3.2.

Deviation: the paper has no EMA on theta and no cap on Delta_theta; the reference code has both
(EMA weight 0.3, Delta_theta <= 5 theta0) and its results depend on them, so they are parameters
defaulting to the code's values (a weight of 1 and a large cap recover the paper). The reference code
evaluates N* with the smoothed theta, which we follow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from policies.bounds import Bound, Clamp, clamp
from policies.ebplus.base_threshold import BaseThreshold, base_threshold
from policies.ebplus.ifr_correction import delta_theta
from policies.ebplus.inputs import CostModel
from policies.ebplus.memory_safe_batch import n_star
from policies.ebplus.params import EbplusParams


@dataclass(frozen=True, slots=True, kw_only=True)
class ThresholdUpdate:
    """Result of one Algorithm 1 update.

    Attributes:
        base: theta0 of Eq. 3 with gamma and zeta.
        rho: beta_d N_prev / alpha_d used in Eq. 5.
        delta_theta_raw: Eq. 5 before the cap (0 when eta <= 0).
        delta_theta: after the cap [0, cap_factor * theta0].
        theta_raw: clip(theta0 + delta_theta, theta_min, theta_max).
        theta_hat: EMA of theta_raw (theta_raw itself on the first update).
        n_star_raw: N* before clamping (may be < 1 when C is too small, or max_num_seqs when auto-N is off).
        n_hat: N* clamped to [min(n_min, max_num_seqs), max_num_seqs].
        k_hat: max(1, floor(theta_hat n_hat)).
        clamps: the guardrail clamps applied (theta clip, N clamp).
    """

    base: BaseThreshold
    rho: float
    delta_theta_raw: float
    delta_theta: float
    theta_raw: float
    theta_hat: float
    n_star_raw: int
    n_hat: int
    k_hat: int
    clamps: tuple[Clamp, ...]


def update_threshold(
    *,
    p0: float,
    eta: float,
    mu_l_tokens: float,
    cost: CostModel,
    kv_capacity_tokens: int,
    max_num_seqs: int,
    theta_hat_prev: float | None,
    n_hat_prev: int | None,
    params: EbplusParams,
) -> ThresholdUpdate:
    """Run lines 7-12 of Algorithm 1 on already fitted (p0, eta) and mu_L.

    Args:
        p0: hazard intercept, per output token, in (0, 1].
        eta: hazard slope; <= 0 means CFR and gives no correction.
        mu_l_tokens: mean prompt length, tokens, > 0.
        cost: iteration-time coefficients.
        kv_capacity_tokens: KV capacity C, tokens.
        max_num_seqs: the engine's slot limit, the upper clamp of N*.
        theta_hat_prev: previous smoothed theta, or None on the first update.
        n_hat_prev: previous N-hat (Eq. 5's N), or None to use max_num_seqs (N_default).
        params: EB+ parameters.

    Raises:
        InvalidInputError: when an input is outside the domain of Eqs. 3, 5 or 6.
    """
    clamps: list[Clamp] = []
    base = base_threshold(p0=p0, alpha_p_s=cost.alpha_p_s, alpha_d_s=cost.alpha_d_s)
    n_prev = n_hat_prev if n_hat_prev is not None else max_num_seqs
    rho = cost.beta_d_s_per_seq * n_prev / cost.alpha_d_s
    if eta > 0.0:
        dtheta_raw = delta_theta(
            theta0=base.theta0,
            p0=p0,
            eta=eta,
            alpha_d_s=cost.alpha_d_s,
            beta_d_s_per_seq=cost.beta_d_s_per_seq,
            n_seqs=n_prev,
        )
    else:
        dtheta_raw = 0.0
    dtheta = min(max(dtheta_raw, 0.0), params.delta_theta_cap_factor * base.theta0)
    theta_raw = clamp(base.theta0 + dtheta, Bound(name="theta", lo=params.theta_min, hi=params.theta_max), clamps)
    if theta_hat_prev is None:
        theta_hat = theta_raw
    else:
        theta_hat = params.theta_ema_alpha * theta_raw + (1.0 - params.theta_ema_alpha) * theta_hat_prev
    if params.auto_n:
        n_star_raw = n_star(
            method=params.n_star_method,
            theta=theta_hat,
            p0=p0,
            mu_l_tokens=mu_l_tokens,
            kv_capacity_tokens=kv_capacity_tokens,
            eps=params.eps_oom,
        )
    else:
        n_star_raw = max_num_seqs
    n_bound = Bound(name="n", lo=min(params.n_min_seqs, max_num_seqs), hi=max_num_seqs)
    n_hat = int(clamp(n_star_raw, n_bound, clamps))
    k_hat = max(1, math.floor(theta_hat * n_hat))
    return ThresholdUpdate(
        base=base,
        rho=rho,
        delta_theta_raw=dtheta_raw,
        delta_theta=dtheta,
        theta_raw=theta_raw,
        theta_hat=theta_hat,
        n_star_raw=n_star_raw,
        n_hat=n_hat,
        k_hat=k_hat,
        clamps=tuple(clamps),
    )
