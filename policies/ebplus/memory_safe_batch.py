"""EB+ memory-safe batch size N* (Eq. 6, Prop. 3.3) and the reference code's CLT variant.

With D(theta) = mu_L + (1 - theta) / (theta p0) * ln(1 / (1 - theta)) the mean KV tokens per slot at
decode start and v_bar = 1 / (p0^2 mu_L) the volatility of the memory random walk (App. D):

- Eq. 6: N* = floor((C - v_bar ln(1/eps)) / D(theta)).
- CLT variant (reference code `_compute_memory_safe_n`): the largest N with
  N D(theta) + sigma(theta) sqrt(N ln(1/eps)) <= C, where
  sigma^2 = 2 Lambda (1 + (p0 mu_L + Lambda / theta)^2) / p0^2 and Lambda = -ln(1 - theta).

C is the KV capacity in tokens (blocks * block_size). specs/seed-001-ebplus.md section 2.4.
Both return the unclamped value, which may be < 1 when C is too small; Algorithm 1 clamps it.
"""

from __future__ import annotations

import enum
import math

from schemas.errors import InvalidInputError


class NStarMethod(enum.StrEnum):
    """Which memory-safety bound sets N*."""

    EQ6 = "eq6"
    CLT = "clt"


def _check(theta: float, p0: float, mu_l_tokens: float, kv_capacity_tokens: float, eps: float) -> None:
    checks = (
        ("theta", theta, 0.0 < theta < 1.0),
        ("p0", p0, 0.0 < p0 <= 1.0),
        ("mu_l_tokens", mu_l_tokens, mu_l_tokens > 0.0),
        ("kv_capacity_tokens", kv_capacity_tokens, kv_capacity_tokens > 0.0),
        ("eps", eps, 0.0 < eps < 1.0),
    )
    for name, value, ok in checks:
        if not (math.isfinite(value) and ok):
            msg = f"{name} out of range for the memory-safe batch size, got {value}"
            raise InvalidInputError(msg, field=name, value=value)


def slot_tokens_at_decode_start(*, theta: float, p0: float, mu_l_tokens: float) -> float:
    """D(theta): expected KV tokens held per slot when a decode phase starts (App. D.2), tokens."""
    return mu_l_tokens + (1.0 - theta) / (theta * p0) * -math.log1p(-theta)


def n_star_eq6(*, theta: float, p0: float, mu_l_tokens: float, kv_capacity_tokens: float, eps: float) -> int:
    """Return N* of Eq. 6 (may be <= 0 when the volatility reserve exceeds C).

    Raises:
        InvalidInputError: when theta is outside (0, 1), p0 outside (0, 1], mu_l_tokens or
            kv_capacity_tokens not > 0, or eps outside (0, 1).
    """
    _check(theta, p0, mu_l_tokens, kv_capacity_tokens, eps)
    v_bar_tokens = 1.0 / (p0 * p0 * mu_l_tokens)
    d_tokens = slot_tokens_at_decode_start(theta=theta, p0=p0, mu_l_tokens=mu_l_tokens)
    return math.floor((kv_capacity_tokens - v_bar_tokens * math.log(1.0 / eps)) / d_tokens)


def n_star_clt(*, theta: float, p0: float, mu_l_tokens: float, kv_capacity_tokens: float, eps: float) -> int:
    """Return N* of the reference code's CLT quadratic N D + sigma sqrt(N ln(1/eps)) <= C.

    Raises:
        InvalidInputError: on the same ranges as ``n_star_eq6``.
    """
    _check(theta, p0, mu_l_tokens, kv_capacity_tokens, eps)
    lam = -math.log1p(-theta)
    sigma = math.sqrt(2.0 * lam * (1.0 + (p0 * mu_l_tokens + lam / theta) ** 2) / (p0 * p0))
    d_tokens = slot_tokens_at_decode_start(theta=theta, p0=p0, mu_l_tokens=mu_l_tokens)
    b = sigma * math.sqrt(math.log(1.0 / eps))
    sqrt_n = (-b + math.sqrt(b * b + 4.0 * d_tokens * kv_capacity_tokens)) / (2.0 * d_tokens)
    return math.floor(sqrt_n * sqrt_n)


def n_star(
    *, method: NStarMethod, theta: float, p0: float, mu_l_tokens: float, kv_capacity_tokens: float, eps: float
) -> int:
    """Return N* by ``method`` (Eq. 6 or the CLT variant), unclamped."""
    solver = n_star_eq6 if method is NStarMethod.EQ6 else n_star_clt
    return solver(theta=theta, p0=p0, mu_l_tokens=mu_l_tokens, kv_capacity_tokens=kv_capacity_tokens, eps=eps)
