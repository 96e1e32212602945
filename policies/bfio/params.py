"""BF-IO parameters with the paper's and the reference code's defaults; specs/seed-003-bfio.md sections 2.6-2.9, 6.5.

Every default cites its source. ``[PAPER]`` is arXiv:2601.17855 v1, ``[CODE]`` the authors' released
simulator as digested in the spec, ``[DESIGN]`` the spec's recommendation for a streaming control plane.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from schemas.errors import InvalidInputError


class BfioMode(enum.StrEnum):
    """What the engine-side router runs (spec section 6.5 ``mode``)."""

    BFIO = "bfio"
    JSQ_LOAD = "jsq_load"
    FCFS = "fcfs"


class WeightScheme(enum.StrEnum):
    """How the horizon offsets h = 0..H are weighted in J (spec section 2.7 step 3, omega_h)."""

    UNIFORM = "uniform"
    DECAY = "decay"


class NewRequestModel(enum.StrEnum):
    """Predicted workload of a newly admitted request (spec section 1.5)."""

    CONST_S = "const_s"
    S_PLUS_H_SURVIVAL = "s_plus_h_survival"


@dataclass(frozen=True, slots=True, kw_only=True)
class BfioParams:
    """Parameters of the BF-IO bundle builder, the fast solver and the router.

    Attributes:
        horizon_steps: lookahead H in decode steps; 0 (myopic BF-IO) unless the operator turns lookahead on.
            The paper's H = 20 (Table 1) predicts from true output lengths; with only what an engine knows
            (the survival estimate, no per-request length hints) H > 0 was never clearly better than H = 0
            and up to 49% worse on one setting (docs/policies/bfio.md), so lookahead is the operator's
            choice (``[bfio] horizon_steps``), for deployments whose requests carry length hints.
        dyadic_grid: evaluate J on offsets {0, 1, 2, 4, ..., H} with block weights instead of every h.
        weight_scheme: omega_h of the objective. Decay (the reference code's, which produced the paper's
            Table 1 H = 20 row) rather than the paper's pure sum over h: the prediction leaves out the
            requests that will refill freed slots, so far offsets describe loads that will not occur, and
            with true lengths uniform weights at H = 20 lose to H = 0 (docs/policies/bfio.md, "Fidelity
            with true lengths"). With H = 0 both schemes give the single weight 1.
        decay_gamma: per-step decay when ``weight_scheme`` is decay.
        drift_tokens_per_step: delta, the per-step workload growth of an active request.
        new_request_model: predicted trajectory of a request admitted at this step.
        candidate_window: Wc, how many waiting requests (FIFO front) the solver may choose from.
        aging_deadline_s: starvation guard; a request waiting this long is admitted before any younger one.
        solver_budget_s: per-call time budget of the fast solver before the JSQ-by-load fallback.
        local_search_rounds: most improving exchange moves after the greedy phase.
        min_survival_events: fewest uncensored finishes a survival table needs to drive the lookahead.
        c_s: fixed step overhead C of the step model Delta_t = C + t_l max_g L_g (Eq. 6).
        t_l_s_per_token: per-resident-token step latency t_l of Eq. 6.
        bundle_ttl_s: event-time seconds a bundle stays valid.
        horizon_confirmations: decisions a new H must be proposed in a row before it replaces the old one.
        assignment_ttl_steps: decode steps a pushed central-pool assignment stays valid.
        self_check: with H > 0, shadow H = 0 beside the lookahead on the live stream and publish the horizon
            whose decisions' realised imbalance wins (policies/bfio/selfcheck.py, docs/policies/bfio.md
            "Online self-check"); no effect at H = 0.
        self_check_margin_frac: hysteresis of the self-check: the side out of force must be lower by this
            share of the side in force's windowed realised imbalance to take over.
        self_check_z: hysteresis of the self-check in standard errors of the windowed paired difference.
        self_check_min_judged_steps: fewest judged steps in the window before the self-check may switch.
        self_check_period_s: event time between an engine's self-check reports.
    """

    horizon_steps: int = 0  # [PAPER] section 6, Table 1: BF-IO (H = 0); H = 20 there uses true lengths
    dyadic_grid: bool = True  # [DESIGN] spec 2.7 step 1: quadrature points {0, 1, 2, 4, 8, ...}
    weight_scheme: WeightScheme = WeightScheme.DECAY  # [CODE] spec 2.6: the reference's J weights 0.86^h
    decay_gamma: float = 0.86  # [CODE] spec 2.6: DECAY = 0.86
    drift_tokens_per_step: float = 1.0  # [PAPER] section 5: decode grows the KV by one token per step
    new_request_model: NewRequestModel = NewRequestModel.S_PLUS_H_SURVIVAL  # [DESIGN] spec 1.5
    candidate_window: int = 128  # [PAPER] section 6.2: revelation target R = 128
    aging_deadline_s: float = 2.0  # [DESIGN] spec 2.7 step 6 / section 8 item 8 (reference max delay 11.3 s)
    solver_budget_s: float = 1.5e-3  # [DESIGN] spec 6.2: the hot path needs under 1-2 ms
    local_search_rounds: int = 8  # [DESIGN] spec 2.7 step 4: exchange moves while J decreases
    min_survival_events: int = 50  # [DESIGN] spec 6.4: survival tables carry n_samples and n_censored
    c_s: float = (72 * 0.6e-3 + 35e-3) / 16  # [CODE] spec 1.3: C = 4.8875 ms at B = 72
    t_l_s_per_token: float = 1.5 * 2 * 576 * 61e-6 / 2**20  # [CODE] spec 1.3: t_l = 1.00525e-7 s
    bundle_ttl_s: float = 30.0  # [DESIGN] spec 6.2: tier-1 loop every 100 ms to 5 s, several periods of slack
    horizon_confirmations: int = 2  # [DESIGN] hysteresis on H so a noisy median does not flap it
    assignment_ttl_steps: int = 50  # [DESIGN] spec 6.5: valid_until_step of a pushed assignment
    self_check: bool = True  # [DESIGN] online self-check: lookahead on is judged against H = 0 live
    self_check_margin_frac: float = 0.001  # [DESIGN] docs/policies/bfio.md "Online self-check": gaps of 0.5-15%
    self_check_z: float = 2.0  # [DESIGN] docs/policies/bfio.md "Online self-check": one-sided 2.3% per look
    self_check_min_judged_steps: int = 200  # [DESIGN] about 2 s of steps at Table 1's load
    self_check_period_s: float = 0.25  # [DESIGN] four reports per bundle interval (1 s)

    def __post_init__(self) -> None:
        checks: tuple[tuple[str, float, float, float], ...] = (
            ("horizon_steps", self.horizon_steps, 0, 4096),
            ("decay_gamma", self.decay_gamma, 0.0, 1.0),
            ("drift_tokens_per_step", self.drift_tokens_per_step, 0.0, 1e6),
            ("candidate_window", self.candidate_window, 1, 1 << 20),
            ("aging_deadline_s", self.aging_deadline_s, 0.0, 1e6),
            ("solver_budget_s", self.solver_budget_s, 0.0, 10.0),
            ("local_search_rounds", self.local_search_rounds, 0, 1 << 20),
            ("min_survival_events", self.min_survival_events, 0, 1 << 30),
            ("c_s", self.c_s, 0.0, 1e3),
            ("t_l_s_per_token", self.t_l_s_per_token, 0.0, 1.0),
            ("bundle_ttl_s", self.bundle_ttl_s, 0.0, 1e6),
            ("horizon_confirmations", self.horizon_confirmations, 1, 1 << 20),
            ("assignment_ttl_steps", self.assignment_ttl_steps, 1, 1 << 30),
            ("self_check_margin_frac", self.self_check_margin_frac, 0.0, 1.0),
            ("self_check_z", self.self_check_z, 0.0, 100.0),
            ("self_check_min_judged_steps", self.self_check_min_judged_steps, 0, 1 << 30),
            ("self_check_period_s", self.self_check_period_s, 1e-3, 3600.0),
        )
        for name, value, lo, hi in checks:
            if not (math.isfinite(value) and lo <= value <= hi):
                msg = f"{name} must be in [{lo}, {hi}], got {value}"
                raise InvalidInputError(msg, field=name, value=value)
