"""One scaling action explained from its record: the plan it followed and each rule that shaped it.

``governor explain scaling POOL [--seq N]`` prints this for an action on ``gov.scaling``, beside the
FleetOpt decision of the plan version it names (``gov.policy.decisions``). Everything here is read
from the two records, never recomputed from today's configuration: the action carries the limits the
rules applied, the cool-down's start and, for a scale-down, the hold's start and the most the plan
wanted while it ran (policies/scaling/rules.py ``PoolDecision``).
"""

from __future__ import annotations

from policies.scaling import replicas_for_gpus
from schemas.policy_docs.fleetopt import FleetoptPolicy
from schemas.scaling import ScalingAction

RULES = {
    "scale_up": "the plan wants more replicas than the pool runs; scale-ups are not held, only step-limited",
    "scale_down": "the plan wanted fewer replicas for the whole hold; the pool goes to the most it wanted meanwhile",
    "out_of_bounds": "the pool ran outside its bounds; it is brought back without the hold, at the step limit",
}


def _t(value: float) -> str:
    return f"t={value:.3f} s"


def explain_action(action: ScalingAction, plan: FleetoptPolicy | None) -> list[str]:
    """Lines saying why ``action`` moved its pool, with ``plan`` (its FleetOpt document) where the log has it."""
    what = {"applied": "applied by", "advisory": "recorded only (advisory) for", "failed": "FAILED on"}[action.result]
    lines = [
        f"{action.pool}: {action.from_replicas} -> {action.to_replicas} replicas at {_t(action.ts)}, {action.reason}, "
        f"{what} {action.target or action.connector} (scaler {action.scaler_id}, seq {action.seq})",
        f"rule       {RULES.get(action.reason, action.reason)}",
    ]
    lines += _plan_lines(action, plan)
    limits = action.limits
    if limits is None:
        lines.append("limits     not on this record (written before actions carried them)")
        return [*lines, *_connector_lines(action)]
    if limits.pinned_replicas is not None:
        lines.append(f"pin        pinned_replicas={limits.pinned_replicas} in the scaler's file: the plan is ignored")
    wanted = limits.pinned_replicas if limits.pinned_replicas is not None else _plan_replicas(action)
    clamp = ""
    if wanted is not None and action.desired_replicas is not None and wanted != action.desired_replicas:
        side = "raised to the minimum" if wanted < action.desired_replicas else "cut to the maximum"
        clamp = f" ({wanted} {side})"
    lines.append(f"bounds     [{limits.min_replicas}, {limits.max_replicas}]: desired {action.desired_replicas}{clamp}")
    moved = abs(action.to_replicas - action.from_replicas)
    limited = action.desired_replicas is not None and action.to_replicas != action.desired_replicas
    lines.append(
        f"step       at most {limits.max_step_replicas} per action: moved {moved}"
        + (f", short of desired {action.desired_replicas} (the step limit or the hold's peak)" if limited else "")
    )
    if action.previous_change_ts is None:
        lines.append(f"cool-down  {limits.cooldown_s:g} s: the pool's first change")
    else:
        since = action.ts - action.previous_change_ts
        lines.append(
            f"cool-down  {limits.cooldown_s:g} s: previous change at {_t(action.previous_change_ts)}, "
            f"{since:g} s before"
        )
    if action.to_replicas < action.from_replicas:
        if action.down_since_ts is None:
            lines.append(f"hold       {limits.scale_down_hold_s:g} s: not applied ({action.reason})")
        else:
            waited = action.ts - action.down_since_ts
            lines.append(
                f"hold       {limits.scale_down_hold_s:g} s: the plan wanted fewer since {_t(action.down_since_ts)} "
                f"({waited:g} s); the most it wanted meanwhile: {action.down_peak_replicas}"
            )
    return [*lines, *_connector_lines(action)]


def _plan_replicas(action: ScalingAction) -> int | None:
    return None if action.plan_gpus is None else replicas_for_gpus(action.plan_gpus, action.gpus_per_replica)


def _plan_lines(action: ScalingAction, plan: FleetoptPolicy | None) -> list[str]:
    if action.plan_version is None:
        return ["plan       none in force (no valid FleetOpt document)"]
    at = "" if action.plan_computed_at is None else f" computed at {_t(action.plan_computed_at)}"
    gpus = "" if action.plan_gpus is None else f": {action.pool} n_gpus={action.plan_gpus}"
    replicas = _plan_replicas(action)
    per = "" if replicas is None else f" = {replicas} replicas of {action.gpus_per_replica} GPU(s)"
    lines = [f"plan       fleetopt fleet v{action.plan_version}{at}{gpus}{per}"]
    if plan is None:
        lines.append("           (its decision is not on gov.policy.decisions)")
        return lines
    lines.append(
        f"           valid until {_t(plan.valid_until)}; previous version "
        f"{'-' if plan.previous_version is None else f'v{plan.previous_version}'}; "
        f"inputs snapshot {plan.inputs.snapshot_id}"
    )
    return lines


def _connector_lines(action: ScalingAction) -> list[str]:
    if action.detail is None:
        return []
    label = "error" if action.result == "failed" else "note"
    return [f"{label:<10} {action.detail}"]
