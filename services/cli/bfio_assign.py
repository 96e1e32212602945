"""``governor bfio assign --input FILE.json``: BF-IO assignments for one decode step (what-if).

The input is a ``BfioStepInput`` (schemas/policy_docs/bfio.py; docs/policies/bfio.md shows an example):
the waiting pool, each rank's active requests and free slots, the step's event time and index, and
optionally the bundle to use (default: the default bundle, without survival tables). It prints the
central-pool assignments the policy service would push, as a table or, with ``--json``, as JSON.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from policies.bfio import BfioParams, build_payload, decide_assignments
from schemas.policy_docs.base import InputsDigest
from schemas.policy_docs.bfio import BfioPolicy, BfioState, BfioStepInput
from services.cli.input_files import read_json_input


def register(commands: Any) -> None:
    """Add the ``bfio`` command group (with ``assign``) to ``governor``."""
    group = commands.add_parser("bfio", help="BF-IO what-if tools")
    sub = group.add_subparsers(dest="bfio_command", metavar="BFIO_COMMAND", required=True)
    assign = sub.add_parser("assign", help="assign one step's waiting requests to DP ranks")
    assign.add_argument("--input", required=True, type=Path, help="one decode step, JSON (BfioStepInput)")
    assign.add_argument("--json", action="store_true", help="print the assignments as JSON")
    assign.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Compute and print the step's assignments; return the exit code."""
    step = read_json_input(args.input, BfioStepInput)
    params = BfioParams()
    payload = step.bundle or build_payload(params, horizon_steps=params.horizon_steps)
    policy = BfioPolicy(
        scope="what-if",
        deployment="what-if",
        version=1,
        computed_at=step.now_s,
        valid_until=step.now_s,
        inputs=InputsDigest(snapshot_id=str(args.input)[:128]),
        payload=payload,
        state=BfioState(horizon_steps=payload.horizon_steps),
    )
    plan = decide_assignments(step, policy, params)
    if args.json:
        document = {
            "objective_j_tokens": plan.objective_j_tokens,
            "fallback_reason": plan.fallback_reason,
            "forced": plan.forced,
            "assignments": [a.model_dump() for a in plan.assignments],
        }
        print(json.dumps(document, indent=2))
        return 0
    print(f"{'request_id':<24} {'rank':>5} {'valid_until_step':>17}")
    for a in plan.assignments:
        print(f"{a.request_id:<24} {a.rank:>5} {a.valid_until_step:>17}")
    waiting = len(step.waiting) - len(plan.assignments)
    objective = "n/a" if plan.objective_j_tokens is None else f"{plan.objective_j_tokens:.1f}"
    print(f"admitted {len(plan.assignments)}, still waiting {waiting}, predicted J {objective} tokens")
    if plan.fallback_reason is not None:
        print(f"fallback: {plan.fallback_reason}")
    return 0
