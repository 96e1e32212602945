"""EB+ mode selection: the crossover rule of Eq. 8 with margin, hysteresis, cooldown and drain gate.

Eq. 8 (paper Section 3.5): run EB iff

    beta_MB^e(r^) - beta_EB^w
        > [(alpha_p + alpha_d zeta0 mu_O) / theta0 - alpha_MB (1 + mu_O)] / (N_obs (mu_L + mu_O)) + delta

with r^ = mu_O / (mu_L + mu_O), beta_EB^w = (beta_p mu_L + beta_d mu_O) / (mu_L + mu_O) and
zeta0 = -ln(1 - theta0). The left-hand side is the marginal-cost gap caused by prefill-decode
interference; the right-hand side is MB's amortised fixed-cost advantage, O(1/N_obs).

The switching discipline is the reference code's `_evaluate_mode_switch` (specs/seed-001-ebplus.md
section 4.3): MB -> EB when signal = LHS - RHS > delta; EB -> MB only when signal < -sticky * delta
("sticky EB"); after a switch the next ``cooldown_evaluations`` evaluations cannot switch (the counter
drops on every evaluation); no switch while N_obs is below ``n_obs_min`` (drain gate).

Deviation: the paper states one threshold (+delta) both ways and no cooldown or drain gate. We follow
the reference code, whose sticky margin, cooldown and drain gate shape its published results: enter EB
when signal > +delta, leave it when signal < -sticky * delta (measured from the RHS without delta, as
the code does); both thresholds are published in the diagnostics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from policies.ebplus.inputs import CostModel
from schemas.errors import InvalidInputError
from schemas.policy_docs.ebplus import EbplusMode


@dataclass(frozen=True, slots=True, kw_only=True)
class CrossoverSignal:
    """Both sides of Eq. 8 and the quantities they are made of.

    Attributes:
        r_hat: steady-state decode ratio mu_O / (mu_L + mu_O).
        beta_mb_e_s_per_token: beta_MB^e(r^), or 0 when the cost model has no beta_MB profile.
        beta_eb_w_s_per_token: workload-weighted EB marginal cost.
        lhs_s_per_token: beta_MB^e(r^) - beta_EB^w (0 without a beta_MB profile: amortisation only).
        rhs_s_per_token: MB's amortised fixed-cost advantage (without delta).
        signal_s_per_token: lhs - rhs.
    """

    r_hat: float
    beta_mb_e_s_per_token: float
    beta_eb_w_s_per_token: float
    lhs_s_per_token: float
    rhs_s_per_token: float
    signal_s_per_token: float


def crossover_signal(
    *, cost: CostModel, theta0: float, mu_l_tokens: float, mu_o_tokens: float, n_obs: float
) -> CrossoverSignal:
    """Evaluate both sides of Eq. 8.

    Args:
        cost: iteration-time coefficients.
        theta0: the threshold used in the RHS (paper: theta0 of Eq. 3), in (0, 1).
        mu_l_tokens: mean prompt length, tokens, > 0.
        mu_o_tokens: mean output length, tokens, > 0.
        n_obs: smoothed occupancy N_obs, sequences, > 0.

    Raises:
        InvalidInputError: on a value outside the ranges above.
    """
    checks = (
        ("theta0", theta0, 0.0 < theta0 < 1.0),
        ("mu_l_tokens", mu_l_tokens, mu_l_tokens > 0.0),
        ("mu_o_tokens", mu_o_tokens, mu_o_tokens > 0.0),
        ("n_obs", n_obs, n_obs > 0.0),
    )
    for name, value, ok in checks:
        if not (math.isfinite(value) and ok):
            msg = f"{name} out of range for Eq. 8, got {value}"
            raise InvalidInputError(msg, field=name, value=value)
    total_tokens = mu_l_tokens + mu_o_tokens
    r_hat = mu_o_tokens / total_tokens
    beta_eb_w = (cost.beta_p_s_per_token * mu_l_tokens + cost.beta_d_s_per_seq * mu_o_tokens) / total_tokens
    if cost.beta_mb is None:
        beta_mb_e = 0.0
        lhs = 0.0
    else:
        beta_mb_e = cost.beta_mb.at(r_hat)
        lhs = beta_mb_e - beta_eb_w
    zeta0 = -math.log1p(-theta0)
    eb_fixed_s = (cost.alpha_p_s + cost.alpha_d_s * zeta0 * mu_o_tokens) / theta0
    mb_fixed_s = cost.alpha_mb_s * (1.0 + mu_o_tokens)
    rhs = (eb_fixed_s - mb_fixed_s) / (n_obs * total_tokens)
    return CrossoverSignal(
        r_hat=r_hat,
        beta_mb_e_s_per_token=beta_mb_e,
        beta_eb_w_s_per_token=beta_eb_w,
        lhs_s_per_token=lhs,
        rhs_s_per_token=rhs,
        signal_s_per_token=lhs - rhs,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ModeChoice:
    """Outcome of one mode evaluation.

    Attributes:
        mode: the mode in force after the evaluation.
        switched: whether this evaluation changed the mode.
        cooldown_remaining: evaluations that still cannot switch.
        reason: why the mode is what it is (``switched``, ``cooldown``, ``drain_gate``, ``hold``).
        delta_to_eb_s_per_token: the signal must exceed this to enter EB.
        delta_to_mb_s_per_token: the signal must fall below this to leave EB.
    """

    mode: EbplusMode
    switched: bool
    cooldown_remaining: int
    reason: str
    delta_to_eb_s_per_token: float
    delta_to_mb_s_per_token: float


def select_mode(
    *,
    current: EbplusMode,
    signal_s_per_token: float,
    n_obs: float,
    cooldown_remaining: int,
    delta_s_per_token: float,
    sticky_factor: float,
    cooldown_evaluations: int,
    n_obs_min: float,
) -> ModeChoice:
    """Apply Eq. 8's margin with the reference code's hysteresis, cooldown and drain gate.

    Args:
        current: the mode in force before this evaluation.
        signal_s_per_token: LHS - RHS of Eq. 8.
        n_obs: smoothed occupancy; below ``n_obs_min`` no switch happens.
        cooldown_remaining: evaluations left in the cooldown (>= 0).
        delta_s_per_token: priority margin delta (> 0 favours MB).
        sticky_factor: leaving EB needs the signal below -sticky_factor * delta.
        cooldown_evaluations: evaluations blocked after a switch.
        n_obs_min: drain-gate occupancy.

    Returns:
        the mode after this evaluation and the updated cooldown.
    """
    to_eb = delta_s_per_token
    to_mb = -sticky_factor * delta_s_per_token
    if cooldown_remaining > 0:
        return ModeChoice(
            mode=current,
            switched=False,
            cooldown_remaining=cooldown_remaining - 1,
            reason="cooldown",
            delta_to_eb_s_per_token=to_eb,
            delta_to_mb_s_per_token=to_mb,
        )
    if n_obs < n_obs_min:
        return ModeChoice(
            mode=current,
            switched=False,
            cooldown_remaining=0,
            reason="drain_gate",
            delta_to_eb_s_per_token=to_eb,
            delta_to_mb_s_per_token=to_mb,
        )
    target: EbplusMode = current
    if current is EbplusMode.MB and signal_s_per_token > to_eb:
        target = EbplusMode.EB
    elif current is EbplusMode.EB and signal_s_per_token < to_mb:
        target = EbplusMode.MB
    switched = target != current
    return ModeChoice(
        mode=target,
        switched=switched,
        cooldown_remaining=cooldown_evaluations if switched else 0,
        reason="switched" if switched else "hold",
        delta_to_eb_s_per_token=to_eb,
        delta_to_mb_s_per_token=to_mb,
    )


def surge_triggered(*, demand_seqs: float, n_obs: float, surge_factor: float, cooldown_remaining: int) -> bool:
    """Whether demand (running + waiting) surged past ``surge_factor`` times N_obs with no cooldown pending.

    The reference code re-evaluates the mode immediately in that case, between the regular
    every-T_upd-completions evaluations; the runtime calls ``decide`` when this returns True.
    """
    return cooldown_remaining == 0 and demand_seqs > surge_factor * n_obs
