"""Erlang-C waiting probability (Eq. 5, stable form Eq. 16) and the P99 queue wait (Eq. 6).

Seed 002 section 3.1 and Appendix A; spec seed-002 section 1.6. The pools are M/G/c queues
whose servers are KV slots, so c reaches 10^4-10^5: the factorials of Eq. 5 overflow long before
that. We evaluate Erlang-B in closed form through the Poisson law,
B(c, a) = P(N = c) / P(N <= c) with N ~ Poisson(a), in log space (log-gamma and the regularised
incomplete gamma function), then C = B / (1 - varrho (1 - B)). That is O(1) in c and exact to
floating-point rounding for every c.

Deviation: the paper evaluates Eq. 16 as a sum of c terms in log space; the closed form above is
the same quantity in O(1), which is what makes a full sweep fit the planner's latency budget.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
from scipy import special

from schemas.errors import InvalidInputError

#: Tail quantile of the wait: W99 is the 99th percentile, so P(wait > W99) = 0.01 (Eq. 6).
WAIT_TAIL_FRAC = 0.01


def erlang_c(c_servers: int, offered_load_erlangs: float) -> float:
    """Probability that an arrival waits in an M/M/c queue (Erlang-C, Eq. 5 / Eq. 16).

    Args:
        c_servers: number of servers c >= 1 (KV slots of the pool).
        offered_load_erlangs: a = lambda / mu >= 0.

    Returns:
        C(c, varrho) in [0, 1]; 1.0 when the queue is unstable (a >= c).

    Raises:
        InvalidInputError: when c < 1 or a is negative or not finite.
    """
    if c_servers < 1:
        msg = f"c_servers must be >= 1, got {c_servers}"
        raise InvalidInputError(msg, field="c_servers", value=c_servers)
    if not (math.isfinite(offered_load_erlangs) and offered_load_erlangs >= 0.0):
        msg = f"offered_load_erlangs must be finite and >= 0, got {offered_load_erlangs}"
        raise InvalidInputError(msg, field="offered_load_erlangs", value=offered_load_erlangs)
    a = offered_load_erlangs
    if a == 0.0:
        return 0.0
    if a >= c_servers:
        return 1.0
    log_pmf = c_servers * math.log(a) - a - float(special.gammaln(c_servers + 1.0))
    cdf = float(special.gammaincc(c_servers + 1.0, a))
    erlang_b = math.exp(log_pmf - math.log(cdf))
    varrho = a / c_servers
    return erlang_b / (1.0 - varrho * (1.0 - erlang_b))


def p99_wait_s(c_servers: int, arrival_rate_per_s: float, mu_slot_per_s: float, cv2: float) -> float:
    """P99 queue wait of an M/G/c pool, the exponential-tail approximation of Eq. 6.

    W99 = ln(C / 0.01) (1 + Cs^2) / (2 (c mu - lambda)), with 0 when C <= 0.01 (the wait is then
    zero at the 99th percentile; Eq. 6's logarithm would go negative) and inf when varrho >= 1.

    Args:
        c_servers: slots in the pool, n_gpus * n_max.
        arrival_rate_per_s: lambda_p of the pool.
        mu_slot_per_s: service rate of one slot, 1 / E[S].
        cv2: squared coefficient of variation of the service time, Cs^2.

    Returns:
        W99 in seconds (0.0, finite, or inf).
    """
    if arrival_rate_per_s <= 0.0:
        return 0.0
    capacity_per_s = c_servers * mu_slot_per_s
    if arrival_rate_per_s >= capacity_per_s:
        return math.inf
    offered = arrival_rate_per_s / mu_slot_per_s
    if _surely_rare_wait(c_servers, offered):
        return 0.0
    prob_wait = erlang_c(c_servers, offered)
    if prob_wait <= WAIT_TAIL_FRAC:
        return 0.0
    return math.log(prob_wait / WAIT_TAIL_FRAC) * (1.0 + cv2) / (2.0 * (capacity_per_s - arrival_rate_per_s))


def _surely_rare_wait(c_servers: int, offered_load_erlangs: float) -> bool:
    """True when C(c, a) is provably far below WAIT_TAIL_FRAC, without the incomplete gamma function.

    With N ~ Poisson(a) and a < c, B = P(N = c) / P(N <= c) and C = B / (1 - varrho (1 - B)) <= B / (1 - varrho).
    The median of a Poisson law is below a + 1/3 (Choi 1994), so P(N <= c) >= 1/2 for every integer
    c >= a and C <= 2 P(N = c) / (1 - varrho). The margin of 10x keeps the verdict the same as the
    full evaluation's ``C <= WAIT_TAIL_FRAC`` whatever its rounding; it only saves time in the many-server
    regime, where C is astronomically small (spec section 1.6).
    """
    varrho = offered_load_erlangs / c_servers
    log_pmf = c_servers * math.log(offered_load_erlangs) - offered_load_erlangs - math.lgamma(c_servers + 1.0)
    return log_pmf + math.log(2.0 / (1.0 - varrho)) < math.log(0.1 * WAIT_TAIL_FRAC)


def rare_wait_columns(
    c_servers: npt.NDArray[np.float64],
    arrival_rate_per_s: npt.NDArray[np.float64],
    mu_slot_per_s: npt.NDArray[np.float64],
) -> npt.NDArray[np.bool_]:
    """Per column: the queue is stable and ``_surely_rare_wait`` holds, so ``p99_wait_s`` returns 0.

    The bound of ``_surely_rare_wait`` evaluated with numpy's log and log-gamma over many pools at
    once; its 10x margin makes the verdict independent of which library's rounding computed it.

    Args:
        c_servers: slots of each pool, n_gpus * n_max (integers held as floats).
        arrival_rate_per_s: lambda_p of each pool, > 0.
        mu_slot_per_s: service rate of one slot of each pool.
    """
    capacity_per_s = c_servers * mu_slot_per_s
    offered = arrival_rate_per_s / mu_slot_per_s
    stable = arrival_rate_per_s < capacity_per_s
    with np.errstate(divide="ignore", invalid="ignore"):
        log_pmf = c_servers * np.log(offered) - offered - special.gammaln(c_servers + 1.0)
        bound = log_pmf + np.log(2.0 / (1.0 - offered / c_servers))
    rare: npt.NDArray[np.bool_] = stable & (bound < math.log(0.1 * WAIT_TAIL_FRAC))
    return rare


#: Relative margin within which numpy's evaluation of Eqs. 5-6 is not trusted to reach the verdict
#: of the scalar ``erlang_c`` / ``p99_wait_s``; numpy's log, exp and the incomplete gamma function
#: agree with them to about 1e-12, so the margin is wide, and callers treat such pools with the scalars.
ROUNDING_MARGIN_FRAC = 1e-8


def wait_within_columns(
    c_servers: npt.NDArray[np.float64],
    arrival_rate_per_s: npt.NDArray[np.float64],
    mu_slot_per_s: npt.NDArray[np.float64],
    cv2: npt.NDArray[np.float64],
    budget_s: npt.NDArray[np.float64],
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """Per pool: ``p99_wait_s(...) <= budget_s``, whether rounding leaves that in doubt, and W99 certainly 0.

    Eqs. 5-6 in numpy over many pools at once. A verdict is in doubt where C lies within
    ``ROUNDING_MARGIN_FRAC`` of WAIT_TAIL_FRAC (zero against positive) or W99 within that margin of
    the budget, counting the absolute error an error in ln(C / 0.01) carries into W99. Elsewhere
    the verdicts are those of ``p99_wait_s``.

    Args:
        c_servers: slots of each pool, n_gpus * n_max (integers held as floats).
        arrival_rate_per_s: lambda_p of each pool, > 0.
        mu_slot_per_s: service rate of one slot of each pool.
        cv2: Cs^2 of each pool.
        budget_s: the wait each pool may have, >= 0.
    """
    capacity_per_s = c_servers * mu_slot_per_s
    stable = arrival_rate_per_s < capacity_per_s
    zero = rare_wait_columns(c_servers, arrival_rate_per_s, mu_slot_per_s)
    within = zero.copy()
    doubtful = np.zeros(zero.size, dtype=np.bool_)
    # The incomplete gamma function is the costly part: evaluate it only where the bound did not settle C.
    at = np.flatnonzero(stable & ~zero)
    if at.size:
        c, lam, mu, budget = c_servers[at], arrival_rate_per_s[at], mu_slot_per_s[at], budget_s[at]
        offered = lam / mu
        log_pmf = c * np.log(offered) - offered - special.gammaln(c + 1.0)
        erlang_b = np.exp(log_pmf - np.log(special.gammaincc(c + 1.0, offered)))
        prob_wait = erlang_b / (1.0 - offered / c * (1.0 - erlang_b))
        waits_at_all = prob_wait <= WAIT_TAIL_FRAC
        s_per_log = (1.0 + cv2[at]) / (2.0 * (c * mu - lam))
        with np.errstate(divide="ignore"):
            wait = np.log(prob_wait / WAIT_TAIL_FRAC) * s_per_log
        zero[at] = waits_at_all
        within[at] = waits_at_all | (wait <= budget)
        near_tail = np.abs(prob_wait - WAIT_TAIL_FRAC) <= ROUNDING_MARGIN_FRAC * WAIT_TAIL_FRAC
        near_budget = ~waits_at_all & (np.abs(wait - budget) <= ROUNDING_MARGIN_FRAC * (budget + s_per_log))
        doubtful[at] = near_tail | near_budget
    return within, doubtful, zero & ~doubtful
