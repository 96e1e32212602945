"""Compress-and-Route traffic split: alpha, beta, p_c and the per-pool arrival rates (Eqs. 1-2, 14).

Seed 002 sections 2.3 and 5; spec seed-002 sections 1.2, 1.5 and 2.6. Requests with
L_total <= B_short go to the short pool; borderline ones in (B, gamma*B] whose category is safe
and whose compression succeeds are cut to T_c = B - L_out (Eq. 15) and join it; the rest go long.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from policies.fleetopt.cdf import LengthCdf
from schemas.errors import InvalidInputError


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


def effective_p_c(
    borderline_share_by_category: Mapping[str, float], safe_categories: tuple[str, ...], success_frac: float
) -> float:
    """p_c = (share of borderline traffic in a safe category) * (compressor success rate), spec section 2.6.

    Args:
        borderline_share_by_category: share of the borderline band per category; shares must sum to 1.
        safe_categories: categories that may be compressed (code never is).
        success_frac: fraction of compressions that fit the budget T_c, in [0, 1].

    Raises:
        InvalidInputError: on negative shares, shares not summing to 1, or success_frac outside [0, 1].
    """
    if any(share < 0.0 for share in borderline_share_by_category.values()):
        msg = f"borderline_share_by_category must be >= 0, got {dict(borderline_share_by_category)}"
        raise InvalidInputError(msg, field="borderline_share_by_category", value=dict(borderline_share_by_category))
    total = sum(borderline_share_by_category.values())
    if abs(total - 1.0) > 1e-6:
        msg = f"borderline_share_by_category must sum to 1, got {total}"
        raise InvalidInputError(msg, field="borderline_share_by_category", value=total)
    if not 0.0 <= success_frac <= 1.0:
        msg = f"success_frac must lie in [0, 1], got {success_frac}"
        raise InvalidInputError(msg, field="success_frac", value=success_frac)
    safe = sum(share for cat, share in borderline_share_by_category.items() if cat in safe_categories)
    return safe * success_frac
