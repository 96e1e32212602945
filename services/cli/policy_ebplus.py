"""``governor policy ebplus --input FILE.json``: the EB+ what-if tool (specs/seed-001-ebplus.md sections 3-5).

Reads one estimate snapshot, either the what-if form (schemas.policy_docs.ebplus.EbplusWhatIfInput)
or what ``governor explain ebplus SCOPE --inputs --json`` prints (the decision and the engine's
estimate snapshot it read, whose EB+ inputs are built as the policy service builds them), runs the
pure ``policies.ebplus.decide`` from a cold start and prints the decision: a readable table by
default, the payload as JSON with ``--json``. A bad file is reported as one line naming the file and
the field, with the offending value shortened.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from policies.ebplus import BetaMbQuadratic, CostModel, EbplusInputs, EbplusParams, NStarMethod, RhsThreshold, decide
from schemas.errors import InvalidInputError
from schemas.policy_docs.ebplus import EbplusWhatIfInput
from schemas.records import EstimateSnapshot
from services.policy.wiring.ebplus import ebplus_inputs


def register(policy_subparsers: Any) -> None:  # argparse's _SubParsersAction is private
    """Add the ``ebplus`` sub-command to ``governor policy``."""
    parser = policy_subparsers.add_parser(
        "ebplus", help="EB+ mode, threshold k and batch size N for an estimate snapshot"
    )
    parser.add_argument("--input", required=True, type=Path, metavar="FILE.json", help="estimate snapshot (JSON)")
    parser.add_argument("--json", action="store_true", help="print the policy payload as JSON")
    parser.set_defaults(handler=run)


SHOWN_VALUE_CHARS = 80


def _invalid(path: Path, exc: ValidationError, prefix: str = "") -> InvalidInputError:
    """One line naming the file, the first bad field and its value, shortened (never the whole file)."""
    first = exc.errors()[0]
    field = prefix + ".".join(str(part) for part in first["loc"]) or None
    where = f"field {field}" if field else "document"
    shown = repr(first.get("input"))
    if len(shown) > SHOWN_VALUE_CHARS:
        shown = shown[: SHOWN_VALUE_CHARS - 3] + "..."
    msg = f"{path}: {where}: {first['msg']} (got {shown})"
    return InvalidInputError(msg, field=field, source=str(path))


def _load(path: Path) -> tuple[EbplusInputs, EbplusParams, float]:
    """The inputs, params and decision time the file describes, in either accepted form."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        msg = f"{path}: cannot read input file ({exc.strerror})"
        raise InvalidInputError(msg, source=str(path)) from exc
    try:
        body = json.loads(text)
    except json.JSONDecodeError as exc:
        msg = f"{path}: not JSON ({exc.msg} at line {exc.lineno})"
        raise InvalidInputError(msg, source=str(path)) from exc
    if isinstance(body, dict) and "snapshot" in body and "decision" in body:
        return _from_explain(path, body)
    try:
        snapshot = EbplusWhatIfInput.model_validate(body)
    except ValidationError as exc:
        raise _invalid(path, exc) from exc
    return _inputs(snapshot), _params(snapshot), snapshot.now_s


def _from_explain(path: Path, body: dict[str, Any]) -> tuple[EbplusInputs, EbplusParams, float]:
    """The EB+ inputs of an explain output's snapshot, at the decision's time, with the default params."""
    try:
        snapshot = EstimateSnapshot.model_validate(body["snapshot"])
    except ValidationError as exc:
        raise _invalid(path, exc, prefix="snapshot.") from exc
    inputs = ebplus_inputs(snapshot)
    if inputs is None:
        msg = f"{path}: snapshot {snapshot.snapshot_id} holds no EB+ inputs yet (no hazard fit, lengths or KV capacity)"
        raise InvalidInputError(msg, field="snapshot", source=str(path))
    decision = body["decision"]
    document = decision.get("document") if isinstance(decision, dict) else None
    computed_at = document.get("computed_at") if isinstance(document, dict) else None
    now_s = float(computed_at) if isinstance(computed_at, int | float) else snapshot.ts
    return inputs, EbplusParams(), now_s


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
    path: Path = args.input
    inputs, params, now_s = _load(path)
    try:
        decision = decide(inputs, None, params, now_s)
    except InvalidInputError as exc:
        msg = f"{path}: {exc}"
        raise InvalidInputError(msg, field=exc.field, value=exc.value, source=str(path)) from exc
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
