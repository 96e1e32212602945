"""FleetOpt decision: Algorithm 1 on an estimate snapshot, then the actuation hysteresis (spec sections 5.3-5.4).

Seed 002 section 6; spec seed-002 sections 2 and 5. ``decide`` runs the planner (``plan_fleet``),
holds B_short for its dwell (re-planning at the held boundary meanwhile), holds pool sizes
(scale up at once, down after a dwell), clamps every pushed parameter, and predicts utilisation
and P99 TTFT per pool at the sizes actually pushed.
"""

from __future__ import annotations

from policies.bounds import Bound, Clamp, clamp
from policies.decision import Decision, DiagnosticValue
from policies.fleetopt.calibration import PoolCalibration
from policies.fleetopt.compression import gamma_b_tokens
from policies.fleetopt.cost import annual_cost_kusd, fleet_cost_usd_per_hr, savings_frac
from policies.fleetopt.hysteresis import BoundaryHold, PoolHold, hold_boundary, hold_pool
from policies.fleetopt.inputs import FleetoptInputs
from policies.fleetopt.params import FleetoptParams
from policies.fleetopt.sizing import PoolSizing, evaluate_pool
from policies.fleetopt.sweep import FleetPlan, PlanPoint, cheapest, plan_fleet, sweep
from schemas.policy_docs.fleetopt import (
    FleetoptCost,
    FleetoptFleet,
    FleetoptPayload,
    FleetoptPlanInputs,
    FleetoptPolicy,
    FleetoptPoolHold,
    FleetoptPoolPrediction,
    FleetoptPoolSpec,
    FleetoptPredictions,
    FleetoptRouting,
    FleetoptState,
)

#: Pool sizes pushed to a provisioner (DESIGN principle 7).
N_GPUS_BOUND_HI = 100_000.0
#: gamma above 2 removes over half a prompt; the paper never validated it (spec pitfall 13).
GAMMA_BOUND = Bound(name="gamma", lo=1.0, hi=2.0)


def _point_at(b_tokens: int, plan: FleetPlan, inputs: FleetoptInputs, params: FleetoptParams) -> PlanPoint:
    """The cheapest point at a held B_short (the homogeneous fleet when B_short is the long window)."""
    if b_tokens == plan.homogeneous.short_ctx_tokens:
        return plan.homogeneous
    return plan.cheapest_at(b_tokens) or cheapest(sweep(inputs, params, b_short_tokens=(b_tokens,)))


def _hold_state(hold: PoolHold) -> FleetoptPoolHold:
    return FleetoptPoolHold(
        n_gpus=hold.n_gpus,
        pending_since_s=hold.pending_since_s,
        pending_runs=hold.pending_runs,
        pending_max_gpus=hold.pending_max_gpus,
    )


def _hold_value(state: FleetoptPoolHold) -> PoolHold:
    return PoolHold(
        n_gpus=state.n_gpus,
        pending_since_s=state.pending_since_s,
        pending_runs=state.pending_runs,
        pending_max_gpus=state.pending_max_gpus,
    )


def _prediction(sizing: PoolSizing, calib: PoolCalibration | None) -> FleetoptPoolPrediction:
    ttft = sizing.p99_ttft_s
    return FleetoptPoolPrediction(
        arrival_rate_per_s=sizing.arrival_rate_per_s,
        mu_gpu_per_s=0.0 if calib is None else calib.mu_gpu_per_s,
        cv2=0.0 if calib is None else calib.cv2,
        util_frac=sizing.util_frac,
        p99_ttft_s=ttft if ttft != float("inf") else None,
    )


def decide(
    inputs: FleetoptInputs, previous: FleetoptPolicy | None, params: FleetoptParams, now_s: float
) -> Decision[FleetoptPayload, FleetoptState]:
    """Decide the fleet plan for one estimate snapshot.

    Args:
        inputs: the estimate snapshot (arrival rate, length CDF, p_c, input share).
        previous: the last published FleetOpt document, None on the first decision.
        params: planner and hysteresis parameters.
        now_s: event time of the decision, seconds.

    Returns:
        The plan of spec section 5.3 as payload, the hysteresis memory as state, diagnostics with
        the planner's unheld targets, and the clamps applied.

    Raises:
        InvalidInputError: when the CDF reaches past the long pool's context window.
    """
    plan = plan_fleet(inputs, params)
    held_b = (
        None
        if previous is None
        else BoundaryHold(b_short_tokens=previous.state.b_short_tokens, since_s=previous.state.b_short_since_s)
    )
    boundary = hold_boundary(plan.best.short_ctx_tokens, held_b, params, now_s)
    point = (
        plan.best
        if boundary.b_short_tokens == plan.best.short_ctx_tokens
        else _point_at(boundary.b_short_tokens, plan, inputs, params)
    )
    # A new B_short means new short-pool engines: its old size carries no meaning.
    same_short = previous is not None and previous.state.b_short_tokens == boundary.b_short_tokens
    short_hold = hold_pool(
        point.short.n_gpus, _hold_value(previous.state.short) if same_short and previous else None, params, now_s
    )
    long_hold = hold_pool(
        point.long.n_gpus, None if previous is None else _hold_value(previous.state.long), params, now_s
    )

    clamps: list[Clamp] = []
    n_short = round(clamp(short_hold.n_gpus, Bound(name="fleet.short.n_gpus", lo=0.0, hi=N_GPUS_BOUND_HI), clamps))
    n_long = round(clamp(long_hold.n_gpus, Bound(name="fleet.long.n_gpus", lo=0.0, hi=N_GPUS_BOUND_HI), clamps))
    gamma = clamp(point.split.gamma, GAMMA_BOUND, clamps)
    b_short = point.short_ctx_tokens

    short = evaluate_pool(n_short, point.split.short_rate_per_s, point.short_calib, params)
    long = evaluate_pool(n_long, point.split.long_rate_per_s, point.long_calib, params)
    cost_hr = fleet_cost_usd_per_hr(n_short, n_long, params)
    homo_gpus = plan.homogeneous.total_gpus
    payload = FleetoptPayload(
        mode=params.mode.value,
        routing=FleetoptRouting(
            b_short_tokens=b_short,
            gamma=gamma,
            gamma_b_tokens=gamma_b_tokens(b_short, gamma),
            safe_categories=list(params.safe_categories),
        ),
        fleet=FleetoptFleet(
            short=FleetoptPoolSpec(n_gpus=n_short, n_max_slots=point.short_slots, c_max_tokens=b_short),
            long=FleetoptPoolSpec(n_gpus=n_long, n_max_slots=point.long_slots, c_max_tokens=point.long_ctx_tokens),
        ),
        inputs=FleetoptPlanInputs(
            arrival_rate_per_s=inputs.arrival_rate_per_s,
            alpha=point.split.alpha,
            beta=point.split.beta,
            p_c=inputs.p_c,
            alpha_prime=point.split.alpha_prime,
            t_slo_s=params.t_slo_s,
            rho_max=params.rho_max,
        ),
        predictions=FleetoptPredictions(
            short=_prediction(short, point.short_calib), long=_prediction(long, point.long_calib)
        ),
        cost=FleetoptCost(
            usd_per_hr=cost_hr,
            annual_kusd=annual_cost_kusd(cost_hr, params),
            homogeneous_gpus=homo_gpus,
            savings_frac=savings_frac(n_short + n_long, homo_gpus),
        ),
        slo_met=short.slo_met and long.slo_met,
    )
    state = FleetoptState(
        b_short_tokens=boundary.b_short_tokens,
        b_short_since_s=boundary.since_s,
        short=_hold_state(short_hold),
        long=_hold_state(long_hold),
    )
    diagnostics: dict[str, DiagnosticValue] = {
        "planned_b_short_tokens": plan.best.short_ctx_tokens,
        "planned_gamma": plan.best.split.gamma,
        "planned_short_gpus": plan.best.short.n_gpus,
        "planned_long_gpus": plan.best.long.n_gpus,
        "planned_savings_frac": plan.savings_frac,
        "target_short_gpus": point.short.n_gpus,
        "target_long_gpus": point.long.n_gpus,
        "points_evaluated": len(plan.points),
        "short_util_frac": short.util_frac,
        "long_util_frac": long.util_frac,
        "short_p99_ttft_s": payload.predictions.short.p99_ttft_s,
        "long_p99_ttft_s": payload.predictions.long.p99_ttft_s,
        "homogeneous_gpus": homo_gpus,
    }
    return Decision(
        payload=payload, state=state, diagnostics=diagnostics, clamps=tuple(clamps), valid_for_s=params.valid_for_s
    )
