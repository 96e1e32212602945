"""FleetOpt's routing half: which pool a request of L_total tokens goes to (seed 002 section 2.3, Eq. 15).

With a valid plan (``FleetoptRouting``): L_total <= B_short goes short; L_total in (B_short, floor(gamma B)]
goes short after compression to T_c = B_short - L_out when its category is safe (and T_c leaves room for a
prompt); everything else goes long. Without a valid plan (none yet, or past ``valid_until``) the safe default
is context fit: any upstream whose context window holds L_total. A pure function: the gateway counts the
tokens, reads the plan and applies the choice.
"""

from __future__ import annotations

from dataclasses import dataclass

from schemas.gateway import RouteReason
from schemas.policy_docs.fleetopt import FleetoptRouting


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolChoice:
    """Where FleetOpt sends one request.

    Attributes:
        pool: the pool name, or None for context fit over every pool.
        reason: the rule that chose it.
        compress_to_tokens: T_c when the prompt must be cut to that many tokens first, else None.
    """

    pool: str | None
    reason: RouteReason
    compress_to_tokens: int | None = None


def choose_pool(
    *,
    l_total_tokens: int,
    l_out_tokens: int,
    category: str | None,
    routing: FleetoptRouting | None,
    short_pool: str,
    long_pool: str,
) -> PoolChoice:
    """Apply the plan's boundary and band to one request.

    Args:
        l_total_tokens: prompt tokens (the upstream's count) plus ``l_out_tokens``.
        l_out_tokens: the request's max_tokens (or the gateway's default for one that names none).
        category: the request's traffic category; None is never compressed.
        routing: the plan's routing knobs, None when no valid plan is in force.
        short_pool: the pool name FleetOpt's short pool has in this fleet.
        long_pool: the pool name of the long pool.
    """
    if routing is None:
        return PoolChoice(pool=None, reason="context_fit")
    b_short = routing.b_short_tokens
    if l_total_tokens <= b_short:
        return PoolChoice(pool=short_pool, reason="fleetopt_short")
    target = b_short - l_out_tokens
    in_band = l_total_tokens <= routing.gamma_b_tokens
    if in_band and category is not None and category in routing.safe_categories and target >= 1:
        return PoolChoice(pool=short_pool, reason="fleetopt_compressed", compress_to_tokens=target)
    return PoolChoice(pool=long_pool, reason="fleetopt_long")
