"""BF-IO bundle decision: H and weights, survival tables, step model, guardrails; specs/seed-003-bfio.md 2.9, 6.5.

The control plane does not assign requests (the router does, every step); it decides the bundle the
router solves with:

- survival tables per class that have at least ``min_survival_events`` uncensored finishes (thinner
  tables would make the lookahead noise; spec section 5.3 measured that +-20% lookahead error loses about
  78% of the H > 0 gain);
- H: the configured lookahead, capped at the shortest median output length among the usable tables (spec
  section 2.9: H should not exceed the median remaining length), and 0 when no table is usable (without a
  predictive signal the paper's H = 0 is the safe choice, spec section 8 item 5); a new H replaces the
  old one only after ``horizon_confirmations`` decisions in a row propose it (hysteresis);
- the online self-check (``policies.bfio.selfcheck``): with H > 0 and ``self_check`` on,
  the bundle carries the lookahead as ``self_check`` for the router to shadow, and the H in force is the
  lookahead or 0, whichever the engine's windowed realised imbalance favours beyond
  ``self_check_margin_frac`` (the side in force keeps its place inside the margin);
- the horizon grid and weights (section 2.7 step 1), the step model (fitted, else the reference code's
  constants), the candidate window, the aging deadline and the solver budget, each clamped to its bound.

Deviation: the paper fixes H per experiment (0 or 20) and has no estimator; the median cap and the
hysteresis are ours.
"""

from __future__ import annotations

import numpy as np

from policies.bfio.horizon import build_horizon_grid
from policies.bfio.inputs import BfioInputs
from policies.bfio.lookahead import SurvivalCurve
from policies.bfio.params import BfioMode, BfioParams
from policies.bfio.selfcheck import SelfCheckWindow, choose_horizon, paired_z
from policies.bounds import Bound, Clamp, clamp
from policies.decision import Decision, DiagnosticValue
from schemas.policy_docs.bfio import (
    BfioPayload,
    BfioPolicy,
    BfioState,
    SelfCheckDoc,
    StepModelDoc,
    SurvivalTableDoc,
)

HORIZON_BOUND = Bound(name="horizon_steps", lo=0, hi=512)
CANDIDATE_WINDOW_BOUND = Bound(name="candidate_window", lo=1, hi=1024)
AGING_DEADLINE_BOUND = Bound(name="aging_deadline_s", lo=0.05, hi=600.0)
SOLVER_BUDGET_BOUND = Bound(name="solver_budget_s", lo=1e-4, hi=0.05)
STEP_C_BOUND = Bound(name="step_model.c_s", lo=0.0, hi=1.0)
STEP_T_L_BOUND = Bound(name="step_model.t_l_s_per_token", lo=0.0, hi=1e-3)


def decide(
    inputs: BfioInputs, previous: BfioPolicy | None, params: BfioParams, now_s: float
) -> Decision[BfioPayload, BfioState]:
    """Decide the BF-IO bundle for one DP deployment from an estimate snapshot.

    Args:
        inputs: survival tables, step-model fit and deployment shape.
        previous: the bundle in force, whose state carries the H hysteresis; None for the first decision.
        params: BF-IO parameters.
        now_s: event time of the decision, seconds (not used in the maths; the runtime stamps it).

    Returns:
        The payload, the state for the next decision, diagnostics and the clamps applied.
    """
    del now_s
    clamps: list[Clamp] = []
    usable = [t for t in inputs.survival_tables if t.n_events >= params.min_survival_events]
    medians: list[float] = []
    for table in usable:
        median = SurvivalCurve(
            edges_tokens=np.asarray(table.edges_tokens, dtype=np.float64),
            survival_frac=np.asarray(table.survival_frac, dtype=np.float64),
        ).median_tokens()
        if median is not None:
            medians.append(median)
    proposed = params.horizon_steps if usable else 0
    if medians and params.drift_tokens_per_step > 0:
        proposed = min(proposed, int(min(medians) / params.drift_tokens_per_step))
    state = _next_state(proposed, previous, params)
    horizon_steps = int(clamp(state.horizon_steps, HORIZON_BOUND, clamps))
    lookahead_before = previous is None or not previous.state.self_check_myopic
    checking = params.self_check and horizon_steps > 0
    lookahead_next, verdict = choose_horizon(
        inputs.self_check if checking else None,
        lookahead_in_force=lookahead_before or not checking,
        margin_frac=params.self_check_margin_frac,
        z_threshold=params.self_check_z,
        min_judged_steps=params.self_check_min_judged_steps,
    )
    state = state.model_copy(update={"horizon_steps": horizon_steps, "self_check_myopic": not lookahead_next})
    c_s = params.c_s if inputs.step_c_s is None else inputs.step_c_s
    t_l = params.t_l_s_per_token if inputs.step_t_l_s_per_token is None else inputs.step_t_l_s_per_token
    usable_names = {t.traffic_class for t in usable}
    default_class = inputs.default_class if inputs.default_class in usable_names else None
    payload = build_payload(
        params,
        horizon_steps=horizon_steps if lookahead_next else 0,
        self_check=_self_check_doc(params, horizon_steps) if checking else None,
        tables=tuple(
            SurvivalTableDoc(
                traffic_class=t.traffic_class,
                edges_tokens=list(t.edges_tokens),
                survival_frac=list(t.survival_frac),
                n_samples=t.n_samples,
                n_censored=t.n_censored,
            )
            for t in usable
        ),
        default_class=default_class,
        c_s=c_s,
        t_l_s_per_token=t_l,
        clamps=clamps,
    )
    diagnostics: dict[str, DiagnosticValue] = {
        "usable_tables": len(usable),
        "dropped_tables": len(inputs.survival_tables) - len(usable),
        "proposed_horizon_steps": proposed,
        "shortest_median_output_tokens": min(medians) if medians else None,
        "step_model_fitted": inputs.step_c_s is not None and inputs.step_t_l_s_per_token is not None,
        "step_s_at_full_ranks": c_s + t_l * inputs.slots_per_rank * 1000.0,
        **_self_check_diagnostics(inputs.self_check, verdict.value if checking else None),
    }
    return Decision(
        payload=payload, state=state, diagnostics=diagnostics, clamps=tuple(clamps), valid_for_s=params.bundle_ttl_s
    )


def build_payload(
    params: BfioParams,
    *,
    horizon_steps: int,
    tables: tuple[SurvivalTableDoc, ...] = (),
    default_class: str | None = None,
    self_check: SelfCheckDoc | None = None,
    c_s: float | None = None,
    t_l_s_per_token: float | None = None,
    clamps: list[Clamp] | None = None,
) -> BfioPayload:
    """Assemble a bundle from parameters and decided values, clamping every pushed parameter.

    With only ``params`` and ``horizon_steps`` it gives the default bundle (no survival tables, the reference
    step model) that the ``bfio assign`` what-if uses when its input names none.
    """
    sink: list[Clamp] = [] if clamps is None else clamps
    grid = build_horizon_grid(
        horizon_steps, dyadic=params.dyadic_grid, scheme=params.weight_scheme, decay_gamma=params.decay_gamma
    )
    return BfioPayload(
        mode=BfioMode.BFIO.value,
        horizon_steps=horizon_steps,
        horizon_grid_steps=[int(h) for h in grid.offsets_steps],
        horizon_weights=[float(w) for w in grid.weights],
        drift_tokens_per_step=params.drift_tokens_per_step,
        new_request_model=params.new_request_model.value,
        candidate_window=int(clamp(params.candidate_window, CANDIDATE_WINDOW_BOUND, sink)),
        aging_deadline_s=clamp(params.aging_deadline_s, AGING_DEADLINE_BOUND, sink),
        solver_budget_s=clamp(params.solver_budget_s, SOLVER_BUDGET_BOUND, sink),
        local_search_rounds=params.local_search_rounds,
        step_model=StepModelDoc(
            c_s=clamp(params.c_s if c_s is None else c_s, STEP_C_BOUND, sink),
            t_l_s_per_token=clamp(
                params.t_l_s_per_token if t_l_s_per_token is None else t_l_s_per_token, STEP_T_L_BOUND, sink
            ),
        ),
        survival_tables=list(tables),
        default_class=default_class,
        self_check=self_check,
    )


def _self_check_doc(params: BfioParams, horizon_steps: int) -> SelfCheckDoc:
    """The lookahead the router shadows against H = 0 (or applies while H = 0 is shadowed)."""
    grid = build_horizon_grid(
        horizon_steps, dyadic=params.dyadic_grid, scheme=params.weight_scheme, decay_gamma=params.decay_gamma
    )
    return SelfCheckDoc(
        horizon_steps=horizon_steps,
        horizon_grid_steps=[int(h) for h in grid.offsets_steps],
        horizon_weights=[float(w) for w in grid.weights],
        period_s=params.self_check_period_s,
    )


def _self_check_diagnostics(window: SelfCheckWindow | None, verdict: str | None) -> dict[str, DiagnosticValue]:
    """What the self-check saw and chose, for the decision record (``explain``); the verdict is None when off."""
    return {
        "self_check": verdict,
        "self_check_judged_steps": None if window is None else window.judged_steps,
        "self_check_myopic_imbalance_tokens": None if window is None else window.myopic_imbalance_tokens,
        "self_check_lookahead_imbalance_tokens": None if window is None else window.lookahead_imbalance_tokens,
        "self_check_z": None if window is None else _finite(paired_z(window)),
    }


def _finite(value: float | None) -> float | None:
    """A diagnostic number JSON can carry: +-inf (every judged step differed alike) is capped at +-1e9."""
    return None if value is None else max(-1e9, min(1e9, value))


def _next_state(proposed: int, previous: BfioPolicy | None, params: BfioParams) -> BfioState:
    """Apply the H hysteresis: a changed H must be proposed ``horizon_confirmations`` times in a row."""
    if previous is None:
        return BfioState(horizon_steps=proposed, decisions=1)
    old = previous.state
    if proposed == old.horizon_steps:
        return BfioState(horizon_steps=proposed, decisions=old.decisions + 1)
    count = old.pending_count + 1 if old.pending_horizon_steps == proposed else 1
    if count >= params.horizon_confirmations:
        return BfioState(horizon_steps=proposed, decisions=old.decisions + 1)
    return BfioState(
        horizon_steps=old.horizon_steps,
        pending_horizon_steps=proposed,
        pending_count=count,
        decisions=old.decisions + 1,
    )
