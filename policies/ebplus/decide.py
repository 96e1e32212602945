"""EB+ decision: Algorithm 1 on the T_upd cadence plus the Eq. 8 mode rule, as one pure function.

``decide`` turns one estimate snapshot and the engine's previous EB+ document into the next one
(specs/seed-001-ebplus.md sections 3-5): it runs Algorithm 1 (online_update.py) when at least T_upd
completions have arrived since the last update and the hazard window holds W_min samples, evaluates
Eq. 8 with hysteresis (mode_selection.py) whenever the window is usable, and pushes (mode, theta, k, N,
KV gate, fallback) with every clamp flagged. Everything that carries over lives in ``EbplusState``.
With ``params.tbt_guard`` and a TBT SLO among the engine's tiers, EB is refused (or left at once)
when its refill stall would break the tightest SLO, and MB steps get a token budget that fits it
(tbt_guard.py; Governor's, not the paper's).

Deviation: the reference code keeps the hazard fit, the EMAs and the mode in the engine. Here the
estimators fit the hazard and the policy floors it as the code's estimator does (p0 >= 1/mu_O,
eta >= 0) when ``p0_geometric_floor`` is set, so an estimator without that post-processing gives the
same decisions. A call between two T_upd boundaries (the runtime's surge trigger) only re-evaluates
the mode, as the code's surge path does.
"""

from __future__ import annotations

import math

from policies.bounds import Bound, Clamp, clamp
from policies.decision import Decision, DiagnosticValue
from policies.ebplus.base_threshold import base_threshold
from policies.ebplus.calibration import calibration_profile
from policies.ebplus.inputs import CostModel, EbplusInputs
from policies.ebplus.mode_selection import crossover_signal, select_mode
from policies.ebplus.online_update import update_threshold
from policies.ebplus.params import EbplusParams, RhsThreshold
from policies.ebplus.tbt_guard import apply_tbt_guard, mb_step_budget_tokens, tbt_guard
from schemas.errors import InvalidInputError
from schemas.policy_docs.ebplus import EbplusFallback, EbplusMode, EbplusPayload, EbplusPolicy, EbplusState, KvGate

PROBE_CALIB_ID = "probe"


def _cost_model(inputs: EbplusInputs, params: EbplusParams) -> tuple[CostModel, str, str] | None:
    """The cost model, its id and its source; None when there is none (the probe).

    The engine's own (its registered profile or its online fits, source ``engine``) comes first;
    else the profile the operator named in the params, which the engine did not declare and which
    the decision therefore marks as ``assumed``.
    """
    if inputs.cost_model is not None:
        return inputs.cost_model, inputs.cost_model_id, "engine"
    if params.calibration_id is None:
        return None
    profile = calibration_profile(params.calibration_id)
    return profile.cost_model, profile.calib_id, "assumed"


def _probe(inputs: EbplusInputs, prev: EbplusState, params: EbplusParams) -> Decision[EbplusPayload, EbplusState]:
    """Run EB at theta_default and N = max_num_seqs so the engine's exclusive steps can be fitted.

    Why: Eq. 8 and Eq. 3 need alpha_p, beta_p, alpha_d and beta_d, the costs of exclusive prefill and
    decode batches. An engine with no calibration profile that runs mixed batching (the cold start)
    seldom runs such batches (never under saturation), so its online fit of them never appears.
    The reference code measures them once offline (HardwareCalibrator, spec section 6.4); this probe
    measures them in service instead. The carried state (mode, hysteresis, Algorithm 1) is left as
    it was, so the first evaluation with fits starts from the cold-start mode, unbiased by the probe.

    Deviation: not in the paper or its code, which always have a calibration.
    """
    payload = EbplusPayload(
        mode=EbplusMode.EB,
        theta=params.theta_default,
        k=max(1, math.floor(params.theta_default * inputs.max_num_seqs)),
        n=inputs.max_num_seqs,
        kv_gate=KvGate(
            s_kv=params.kv_gate_s_kv, f0=params.kv_gate_f0, f_min=params.kv_gate_f_min, f_max=params.kv_gate_f_max
        ),
        mu_l_tokens=inputs.mu_l_tokens,
        mu_o_tokens=inputs.mu_o_tokens,
        calib_id=PROBE_CALIB_ID,
        fallback=EbplusFallback(mode=EbplusMode.MB, theta=params.theta_default, n=inputs.max_num_seqs),
    )
    diagnostics: dict[str, DiagnosticValue] = {
        "calib_id": PROBE_CALIB_ID,
        "calib_source": "probe",
        "completions": inputs.completions,
        "algorithm1_ran": False,
        "evaluated": False,
        "mode_reason": "probing_cost_model",
    }
    if inputs.declared_profile is not None:
        diagnostics["declared_profile_unused"] = inputs.declared_profile
    return Decision(payload=payload, state=prev, diagnostics=diagnostics, clamps=(), valid_for_s=params.valid_for_s)


def decide(
    inputs: EbplusInputs, previous: EbplusPolicy | None, params: EbplusParams, now_s: float
) -> Decision[EbplusPayload, EbplusState]:
    """Decide the EB+ policy for one engine.

    Args:
        inputs: the estimate snapshot (hazard fit, mean lengths, N_obs, cost model, KV capacity).
        previous: the engine's previous EB+ document, or None at cold start (mode = cold_start_mode).
        params: EB+ parameters.
        now_s: event time of the decision, seconds (recorded as the switch time when the mode changes).

    Returns:
        the payload engines obey, the state the next decision reads, diagnostics and clamps; with
        neither an input cost model nor a params profile, the EB probe (``_probe``).

    Raises:
        InvalidInputError: when now_s is not finite and >= 0, or params names an unknown calibration.
    """
    if not math.isfinite(now_s) or now_s < 0.0:
        msg = f"now_s must be finite and >= 0, got {now_s}"
        raise InvalidInputError(msg, field="now_s", value=now_s)
    prev = previous.state if previous is not None else EbplusState(mode=params.cold_start_mode)
    source = _cost_model(inputs, params)
    if source is None:
        return _probe(inputs, prev, params)
    cost, calib_id, calib_source = source
    clamps: list[Clamp] = []
    p0, eta = inputs.p0, inputs.eta
    if params.p0_geometric_floor:
        p0 = max(p0, 1.0 / inputs.mu_o_tokens)
        eta = max(eta, 0.0)
    diagnostics: dict[str, DiagnosticValue] = {
        "p0": p0,
        "eta": eta,
        "hazard_samples": inputs.hazard_samples,
        "mu_l_tokens": inputs.mu_l_tokens,
        "mu_o_tokens": inputs.mu_o_tokens,
        "n_obs": inputs.n_obs,
        "calib_id": calib_id,
        "calib_source": calib_source,
        "completions": inputs.completions,
        "algorithm1_ran": False,
        "evaluated": False,
    }
    if calib_source == "assumed":
        diagnostics["calib_reason"] = "engine declared no known profile and has no online cost fits yet"
    if inputs.declared_profile is not None and inputs.declared_profile != calib_id:
        diagnostics["declared_profile_unused"] = inputs.declared_profile
    theta_hat, n_hat, last_update = prev.theta_hat, prev.n_hat, prev.last_update_completions
    mode, cooldown, switch_count, last_switch_s = (
        prev.mode,
        prev.cooldown_remaining,
        prev.switch_count,
        prev.last_switch_s,
    )
    evaluations = prev.evaluations
    enough_samples = inputs.hazard_samples >= params.w_min_samples
    if not enough_samples:
        diagnostics["mode_reason"] = "insufficient_samples"
    else:
        since_update = inputs.completions - (last_update or 0)
        if since_update < 0:  # the engine restarted its completion count
            since_update = inputs.completions
        if since_update >= params.t_upd_completions:
            update = update_threshold(
                p0=p0,
                eta=eta,
                mu_l_tokens=inputs.mu_l_tokens,
                cost=cost,
                kv_capacity_tokens=inputs.kv_capacity_tokens,
                max_num_seqs=inputs.max_num_seqs,
                theta_hat_prev=theta_hat,
                n_hat_prev=n_hat,
                params=params,
            )
            theta_hat, n_hat, last_update = update.theta_hat, update.n_hat, inputs.completions
            clamps.extend(update.clamps)
            diagnostics.update(
                algorithm1_ran=True,
                rho=update.rho,
                delta_theta_raw=update.delta_theta_raw,
                delta_theta=update.delta_theta,
                theta_raw=update.theta_raw,
                n_star_raw=update.n_star_raw,
            )
    theta_push = clamp(
        theta_hat if theta_hat is not None else params.theta_default,
        Bound(name="theta", lo=params.theta_min, hi=params.theta_max),
        clamps,
    )
    n_bound = Bound(name="n", lo=1, hi=inputs.max_num_seqs)
    n_push = int(clamp(n_hat if n_hat is not None else inputs.max_num_seqs, n_bound, clamps))
    k_push = int(clamp(max(1, math.floor(theta_push * n_push)), Bound(name="k", lo=1, hi=n_push), clamps))
    diagnostics.update(theta=theta_push, k=k_push, n=n_push)
    if enough_samples:
        base = base_threshold(p0=p0, alpha_p_s=cost.alpha_p_s, alpha_d_s=cost.alpha_d_s)
        diagnostics.update(gamma=base.gamma, theta0=base.theta0, zeta=base.zeta)
        theta_rhs = base.theta0
        if params.rhs_threshold is RhsThreshold.THETA_STAR:
            theta_rhs = theta_hat if theta_hat is not None else params.theta_default
        if inputs.n_obs > 0.0:
            signal = crossover_signal(
                cost=cost,
                theta0=theta_rhs,
                mu_l_tokens=inputs.mu_l_tokens,
                mu_o_tokens=inputs.mu_o_tokens,
                n_obs=inputs.n_obs,
            )
            signal_s_per_token = signal.signal_s_per_token
            diagnostics.update(
                r_hat=signal.r_hat,
                beta_mb_e=signal.beta_mb_e_s_per_token,
                beta_eb_w=signal.beta_eb_w_s_per_token,
                lhs=signal.lhs_s_per_token,
                rhs=signal.rhs_s_per_token,
                signal=signal_s_per_token,
            )
        else:
            signal_s_per_token = -math.inf  # Eq. 8's RHS grows without bound as N_obs -> 0: MB
        choice = select_mode(
            current=mode,
            signal_s_per_token=signal_s_per_token,
            n_obs=inputs.n_obs,
            cooldown_remaining=cooldown,
            delta_s_per_token=params.delta_s_per_token,
            sticky_factor=params.sticky_factor,
            cooldown_evaluations=params.cooldown_evaluations,
            n_obs_min=params.n_obs_min,
        )
        if params.tbt_guard and inputs.tbt_slo_min_s is not None:
            guard = tbt_guard(
                cost=cost,
                k=k_push,
                n=n_push,
                mu_l_tokens=inputs.mu_l_tokens,
                token_budget_tokens=inputs.token_budget_tokens,
                tbt_slo_min_s=inputs.tbt_slo_min_s,
            )
            diagnostics.update(refill_stall_s=guard.refill_stall_s, tbt_slo_min_s=guard.tbt_slo_min_s)
            choice = apply_tbt_guard(
                choice, current=mode, guard=guard, cooldown_evaluations=params.cooldown_evaluations
            )
        evaluations += 1
        mode, cooldown = choice.mode, choice.cooldown_remaining
        if choice.switched:
            switch_count += 1
            last_switch_s = now_s
        diagnostics.update(
            evaluated=True,
            mode_reason=choice.reason,
            switched=choice.switched,
            delta_to_eb=choice.delta_to_eb_s_per_token,
            delta_to_mb=choice.delta_to_mb_s_per_token,
        )
    diagnostics.update(cooldown_remaining=cooldown, switch_count=switch_count)
    mb_budget = None
    if params.tbt_guard and params.mb_step_budget and inputs.tbt_slo_min_s is not None:
        mb_budget = mb_step_budget_tokens(
            cost=cost,
            max_num_seqs=inputs.max_num_seqs,
            tbt_slo_min_s=inputs.tbt_slo_min_s,
            token_budget_tokens=inputs.token_budget_tokens,
        )
        diagnostics.update(mb_token_budget_tokens=mb_budget)
    payload = EbplusPayload(
        mode=mode,
        theta=theta_push,
        k=k_push,
        n=n_push,
        kv_gate=KvGate(
            s_kv=params.kv_gate_s_kv, f0=params.kv_gate_f0, f_min=params.kv_gate_f_min, f_max=params.kv_gate_f_max
        ),
        mu_l_tokens=inputs.mu_l_tokens,
        mu_o_tokens=inputs.mu_o_tokens,
        calib_id=calib_id,
        fallback=EbplusFallback(mode=EbplusMode.MB, theta=params.theta_default, n=inputs.max_num_seqs),
        mb_token_budget_tokens=mb_budget,
    )
    state = EbplusState(
        mode=mode,
        theta_hat=theta_hat,
        n_hat=n_hat,
        last_update_completions=last_update,
        cooldown_remaining=cooldown,
        switch_count=switch_count,
        last_switch_s=last_switch_s,
        evaluations=evaluations,
    )
    return Decision(
        payload=payload, state=state, diagnostics=diagnostics, clamps=tuple(clamps), valid_for_s=params.valid_for_s
    )
