"""``governor policy ebplus --input FILE.json``: the EB+ what-if tool (specs/seed-001-ebplus.md sections 3-5).

Reads one estimate snapshot, either the what-if form (schemas.policy_docs.ebplus.EbplusWhatIfInput),
decided by the pure ``policies.ebplus.decide`` from a cold start, or what ``governor explain ebplus
SCOPE --inputs --json`` prints, decided again as the policy service decided it (its inputs, its
previous version, ``--config``'s params: services/cli/policy_explained.py). It prints the decision:
a readable table by default, the payload as JSON with ``--json``. A bad file is reported as one line
naming the file and the field, with the offending value shortened.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from policies.decision import Decision
from policies.ebplus import BetaMbQuadratic, CostModel, EbplusInputs, EbplusParams, NStarMethod, RhsThreshold, decide
from schemas.errors import InvalidInputError
from schemas.policy_docs.ebplus import EbplusPayload, EbplusState, EbplusWhatIfInput
from services.cli.input_files import read_json
from services.cli.policy_explained import add_config_flag, decide_explained, invalid_input, is_explain_output


def register(policy_subparsers: Any) -> None:  # argparse's _SubParsersAction is private
    """Add the ``ebplus`` sub-command to ``governor policy``."""
    parser = policy_subparsers.add_parser(
        "ebplus", help="EB+ mode, threshold k and batch size N for an estimate snapshot"
    )
    parser.add_argument("--input", required=True, type=Path, metavar="FILE.json", help="estimate snapshot (JSON)")
    parser.add_argument("--json", action="store_true", help="print the policy payload as JSON")
    add_config_flag(parser)
    parser.set_defaults(handler=run)


def _load(path: Path, config_path: Path | None) -> Decision[EbplusPayload, EbplusState]:
    """The decision for the file, in either accepted form."""
    body = read_json(path)
    if is_explain_output(body):
        decided: Decision[EbplusPayload, EbplusState] = decide_explained(
            path, body, "ebplus", config_path=config_path
        ).decision
        return decided
    try:
        snapshot = EbplusWhatIfInput.model_validate(body)
    except ValidationError as exc:
        raise invalid_input(path, exc) from exc
    try:
        return decide(_inputs(snapshot), None, _params(snapshot), snapshot.now_s)
    except InvalidInputError as exc:
        msg = f"{path}: {exc}"
        raise InvalidInputError(msg, field=exc.field, value=exc.value, source=str(path)) from exc


def _params(snapshot: EbplusWhatIfInput) -> EbplusParams:
    overrides: dict[str, Any] = {k: v for k, v in snapshot.params.model_dump().items() if v is not None}
    if "n_star_method" in overrides:
        overrides["n_star_method"] = NStarMethod(overrides["n_star_method"])
    if "rhs_threshold" in overrides:
        overrides["rhs_threshold"] = RhsThreshold(overrides["rhs_threshold"])
    return dataclasses.replace(EbplusParams(), **overrides)


def _inputs(snapshot: EbplusWhatIfInput) -> EbplusInputs:
    cost = None
    if snapshot.cost_model is not None:
        beta = snapshot.cost_model.beta_mb
        cost = CostModel(
            alpha_p_s=snapshot.cost_model.alpha_p_s,
            beta_p_s_per_token=snapshot.cost_model.beta_p_s_per_token,
            alpha_d_s=snapshot.cost_model.alpha_d_s,
            beta_d_s_per_seq=snapshot.cost_model.beta_d_s_per_seq,
            alpha_mb_s=snapshot.cost_model.alpha_mb_s,
            beta_mb=None
            if beta is None
            else BetaMbQuadratic(
                c0_s_per_token=beta.c0_s_per_token,
                c1_s_per_token=beta.c1_s_per_token,
                c2_s_per_token=beta.c2_s_per_token,
            ),
        )
    return EbplusInputs(
        p0=snapshot.p0,
        eta=snapshot.eta,
        hazard_samples=snapshot.hazard_samples,
        mu_l_tokens=snapshot.mu_l_tokens,
        mu_o_tokens=snapshot.mu_o_tokens,
        n_obs=snapshot.n_obs,
        cost_model=cost,
        kv_capacity_tokens=snapshot.kv_capacity_tokens,
        max_num_seqs=snapshot.max_num_seqs,
        completions=snapshot.completions,
        tbt_slo_min_s=snapshot.tbt_slo_min_s,
        token_budget_tokens=snapshot.token_budget_tokens,
    )


def run(args: argparse.Namespace) -> int:
    """Print the EB+ decision for the snapshot in ``args.input``; return 0."""
    decision = _load(args.input, args.config)
    if args.json:
        print(decision.payload.model_dump_json(indent=2))
        return 0
    payload = decision.payload
    rows: list[tuple[str, object]] = [
        ("mode", payload.mode),
        ("theta", payload.theta),
        ("k", payload.k),
        ("N", payload.n),
        ("calib_id", payload.calib_id),
        ("kv_gate", json.dumps(payload.kv_gate.model_dump())),
    ]
    shown_names = {"mode", "theta", "k", "n", "calib_id"}
    rows += [(name, value) for name, value in decision.diagnostics.items() if name not in shown_names]
    rows += [(f"clamp:{c.name}", f"{c.decided} -> {c.pushed}") for c in decision.clamps]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        shown = f"{value:.6g}" if isinstance(value, float) else str(value)
        print(f"{name:<{width}}  {shown}")
    return 0
