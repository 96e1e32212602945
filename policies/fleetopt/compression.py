"""Compress-and-Route traffic split: alpha, beta, p_c and the per-pool arrival rates (Eqs. 1-2, 14).

Seed 002 sections 2.3 and 5; spec seed-002 sections 1.2, 1.5 and 2.6. Requests with
L_total <= B_short go to the short pool; borderline ones in (B, gamma*B] whose category is safe
and whose compression succeeds are cut to T_c = B - L_out (Eq. 15) and join it; the rest go long.
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.fleetopt.cdf import LengthCdf


@dataclass(frozen=True, slots=True, kw_only=True)
class RoutingSplit:
    """How one (B_short, gamma) splits the fleet's traffic.

    Attributes:
        b_short_tokens: routing boundary B.
        gamma: compression bandwidth ratio.
        gamma_b_tokens: floor(gamma * B), the integer top of the borderline band.
        alpha: F(B), natively short share.
        beta: F(gamma*B) - F(B), borderline share.
        alpha_prime: min(1, alpha + beta p_c), share served by the short pool (Eq. 14).
        short_rate_per_s: lambda_s = alpha' lambda (Eq. 1).
        long_rate_per_s: lambda_l = (1 - alpha') lambda (Eq. 2).
    """

    b_short_tokens: int
    gamma: float
    gamma_b_tokens: int
    alpha: float
    beta: float
    alpha_prime: float
    short_rate_per_s: float
    long_rate_per_s: float


def gamma_b_tokens(b_short_tokens: int, gamma: float) -> int:
    """floor(gamma * B): the planner and the router must use the same integer band top (spec section 1.2)."""
    return int(gamma * b_short_tokens)


def split_traffic(
    cdf: LengthCdf, arrival_rate_per_s: float, b_short_tokens: int, gamma: float, p_c: float
) -> RoutingSplit:
    """Per-pool arrival rates for one (B, gamma) by Eqs. 1, 2 and 14 (alpha, beta by linear interpolation)."""
    top = gamma_b_tokens(b_short_tokens, gamma)
    alpha = cdf.at(b_short_tokens)
    beta = max(0.0, cdf.at(top) - alpha)
    alpha_prime = min(1.0, alpha + beta * p_c)
    return RoutingSplit(
        b_short_tokens=b_short_tokens,
        gamma=gamma,
        gamma_b_tokens=top,
        alpha=alpha,
        beta=beta,
        alpha_prime=alpha_prime,
        short_rate_per_s=alpha_prime * arrival_rate_per_s,
        long_rate_per_s=(1.0 - alpha_prime) * arrival_rate_per_s,
    )
