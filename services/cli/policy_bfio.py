"""``governor policy bfio --input FILE.json``: the BF-IO bundle for an estimate snapshot (what-if).

The input is a ``BfioWhatIfInput`` (schemas/policy_docs/bfio.py; docs/policies/bfio.md shows an example):
deployment shape, survival tables per class, the fitted step model and optional parameter overrides,
decided from a cold start; or what ``governor explain bfio ENGINE --inputs --json`` prints, decided
again as the policy service decided it (services/cli/policy_explained.py). It prints the bundle an
engine-side router would receive, as a table or, with ``--json``, as JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

from policies.bfio import BfioInputs, BfioParams, NewRequestModel, SurvivalTable, WeightScheme, decide
from policies.decision import Decision
from schemas.policy_docs.bfio import BfioParamsOverride, BfioPayload, BfioWhatIfInput
from services.cli.input_files import read_json, read_json_input
from services.cli.policy_explained import add_config_flag, decide_explained, is_explain_output


def register(policy_subparsers: Any) -> None:
    """Add the ``bfio`` sub-command to ``governor policy``."""
    parser = policy_subparsers.add_parser("bfio", help="BF-IO bundle (H, survival tables, step model) for a snapshot")
    parser.add_argument("--input", required=True, type=Path, help="estimate snapshot, JSON (BfioWhatIfInput)")
    parser.add_argument("--json", action="store_true", help="print the bundle payload as JSON")
    add_config_flag(parser)
    parser.set_defaults(handler=run)


def params_with(overrides: BfioParamsOverride | None) -> BfioParams:
    """Default BfioParams with the non-null overrides of a what-if input applied."""
    params = BfioParams()
    if overrides is None:
        return params
    changes: dict[str, object] = {k: v for k, v in overrides.model_dump().items() if v is not None}
    if "weight_scheme" in changes:
        changes["weight_scheme"] = WeightScheme(str(changes["weight_scheme"]))
    if "new_request_model" in changes:
        changes["new_request_model"] = NewRequestModel(str(changes["new_request_model"]))
    return dataclasses.replace(params, **changes)  # type: ignore[arg-type]


def _what_if(path: Path) -> Decision[BfioPayload, Any]:
    """The bundle of a what-if input (``BfioWhatIfInput``), decided from a cold start."""
    snapshot = read_json_input(path, BfioWhatIfInput)
    params = params_with(snapshot.params)
    inputs = BfioInputs(
        num_ranks=snapshot.num_ranks,
        slots_per_rank=snapshot.slots_per_rank,
        survival_tables=tuple(
            SurvivalTable(
                traffic_class=t.traffic_class,
                edges_tokens=tuple(t.edges_tokens),
                survival_frac=tuple(t.survival_frac),
                n_samples=t.n_samples,
                n_censored=t.n_censored,
            )
            for t in snapshot.survival_tables
        ),
        default_class=snapshot.default_class,
        step_c_s=None if snapshot.step_model is None else snapshot.step_model.c_s,
        step_t_l_s_per_token=None if snapshot.step_model is None else snapshot.step_model.t_l_s_per_token,
    )
    return decide(inputs, None, params, snapshot.now_s)


def run(args: argparse.Namespace) -> int:
    """Decide the bundle for the snapshot in ``args.input`` and print it; return the exit code."""
    body = read_json(args.input)
    decision = (
        decide_explained(args.input, body, "bfio", config_path=args.config).decision
        if is_explain_output(body)
        else _what_if(args.input)
    )
    if args.json:
        print(decision.payload.model_dump_json(indent=2))
        return 0
    payload = decision.payload
    rows: list[tuple[str, str]] = [
        ("mode", payload.mode),
        ("horizon_steps", str(payload.horizon_steps)),
        ("horizon_grid_steps", json.dumps(payload.horizon_grid_steps)),
        ("horizon_weights", json.dumps([round(w, 4) for w in payload.horizon_weights])),
        ("new_request_model", payload.new_request_model),
        ("candidate_window", str(payload.candidate_window)),
        ("aging_deadline_s", f"{payload.aging_deadline_s:g}"),
        ("solver_budget_s", f"{payload.solver_budget_s:g}"),
        ("fallback_policy", payload.fallback_policy),
        ("step_model.c_s", f"{payload.step_model.c_s:.6g}"),
        ("step_model.t_l_s_per_token", f"{payload.step_model.t_l_s_per_token:.6g}"),
        ("survival_tables", ", ".join(t.traffic_class for t in payload.survival_tables) or "(none)"),
        ("default_class", payload.default_class or "(none)"),
    ]
    rows += [(f"diagnostics.{k}", str(v)) for k, v in decision.diagnostics.items()]
    rows += [(f"clamped.{c.name}", f"{c.decided:g} -> {c.pushed:g}") for c in decision.clamps]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name.ljust(width)}  {value}")
    return 0
