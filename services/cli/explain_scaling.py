"""``governor explain scaling POOL [--seq N]``: one scaling action, with the FleetOpt decision it followed.

Reads the deployment's actions on ``gov.scaling`` and picks the pool's action with sequence number
``--seq`` (default: its newest), then the FleetOpt decision of the plan version the action names on
``gov.policy.decisions``, and prints why the pool moved (services/scaler/explanation.py); ``--json``
prints both records.
"""

from __future__ import annotations

import argparse
import json

from schemas.errors import GovernorError, InvalidInputError
from schemas.policy_docs.fleetopt import FleetoptPolicy
from schemas.scaling import ScalingAction
from services.cli.options import settings_from_args
from services.inspection.decisions import find_decision
from services.scaler.actions import read_actions
from services.scaler.explanation import explain_action


def pick_action(actions: list[ScalingAction], pool: str, seq: int | None) -> ScalingAction:
    """The pool's action with ``seq`` (default its newest).

    Raises:
        InvalidInputError: the log has no such action; the message lists the pools or sequence numbers it has.
    """
    mine = [action for action in actions if action.pool == pool]
    if not mine:
        pools = ", ".join(sorted({action.pool for action in actions})) or "none"
        msg = f"no scaling action of pool {pool} on gov.scaling (pools with actions: {pools})"
        raise InvalidInputError(msg, field="pool")
    if seq is None:
        return mine[-1]
    for action in mine:
        if action.seq == seq:
            return action
    msg = f"pool {pool} has no action with seq {seq} (it has {', '.join(str(a.seq) for a in mine)})"
    raise InvalidInputError(msg, field="seq")


def run(args: argparse.Namespace) -> int:
    """Find the action and its plan and print why the pool moved."""
    settings = settings_from_args(args)
    actions = read_actions(
        settings.kafka_bootstrap,
        settings.deployment,
        timeout_s=settings.kafka_timeout_s,
        security=settings.kafka_security(),
    )
    action = pick_action(actions, args.scope, args.seq)
    plan = None
    if action.plan_version is not None:
        try:
            record = find_decision(
                settings.kafka_bootstrap,
                deployment=settings.deployment,
                kind="fleetopt",
                scope="fleet",
                version=action.plan_version,
                timeout_s=settings.kafka_timeout_s,
                security=settings.kafka_security(),
            )
            plan = FleetoptPolicy.model_validate(record.document)
        except GovernorError:
            plan = None
    if args.json:
        body = {
            "action": action.model_dump(mode="json"),
            "plan": None if plan is None else plan.model_dump(mode="json"),
        }
        print(json.dumps(body, indent=2, sort_keys=True))
    else:
        print("\n".join(explain_action(action, plan)))
    return 0
