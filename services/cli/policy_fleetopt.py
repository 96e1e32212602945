"""``governor policy fleetopt``: what-if fleet plan from a CDF file or an estimate snapshot.

Reads a ``FleetoptWhatIfInput`` JSON file (or a bare length-CDF file plus ``--arrival-rate-per-s``),
or what ``governor explain fleetopt fleet --inputs --json`` prints (decided again as the policy
service decided it: services/cli/policy_explained.py), runs the pure planner and prints the plan
with its homogeneous baseline as a table, or the plan document's payload as JSON with ``--json``.
Bad input raises ``InvalidInputError`` naming the file and the field path.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from policies.decision import Decision
from policies.fleetopt import FleetoptInputs, FleetoptParams, LengthCdf, PlannerMode, decide, homogeneous_fleet
from schemas.errors import InvalidInputError
from schemas.policy_docs.fleetopt import FleetoptPayload, FleetoptWhatIfInput
from services.cli.policy_explained import add_config_flag, decide_explained, is_explain_output
from services.policy.config import fleetopt_params

_CDF_ADAPTER: TypeAdapter[list[tuple[int, float]]] = TypeAdapter(list[tuple[int, float]])


def register(policy_subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``fleetopt`` sub-command to ``governor policy``."""
    parser = policy_subparsers.add_parser(
        "fleetopt",
        help="what-if FleetOpt plan: two-pool fleet, boundary and compression from a length CDF",
        description="Plan a two-pool fleet (FleetOpt, seed 002) for a workload; see docs/policies/fleetopt.md.",
    )
    parser.add_argument("--input", required=True, type=Path, metavar="FILE.json", help="what-if input or a CDF file")
    parser.add_argument("--json", action="store_true", help="print the plan document's payload as JSON")
    parser.add_argument("--mode", choices=[m.value for m in PlannerMode], help="override the planner mode")
    parser.add_argument("--arrival-rate-per-s", type=float, help="fleet arrival rate (required for a bare CDF file)")
    parser.add_argument("--p-c", type=float, help="override the effective compressibility p_c")
    parser.add_argument("--t-slo-s", type=float, help="override the P99 TTFT target, seconds")
    parser.add_argument("--b-short", type=int, action="append", metavar="TOKENS", help="fix B_short (repeatable)")
    add_config_flag(parser)
    parser.set_defaults(handler=run)


def _field_path(error: ValidationError) -> str:
    first = error.errors()[0]
    path = ".".join(str(part) for part in first["loc"]) or "(root)"
    return f"{path}: {first['msg']}"


def _validate(model: type[BaseModel] | TypeAdapter[Any], text: str, path: Path) -> Any:
    try:
        if isinstance(model, TypeAdapter):
            return model.validate_json(text, strict=True)
        return model.model_validate_json(text, strict=True)
    except ValidationError as exc:
        msg = f"{path}: {_field_path(exc)}"
        raise InvalidInputError(msg, field=_field_path(exc).split(":")[0], source=str(path)) from exc


def _read(path: Path) -> tuple[str, object]:
    try:
        text = path.read_text()
    except OSError as exc:
        msg = f"{path}: cannot read: {exc.strerror}"
        raise InvalidInputError(msg, source=str(path)) from exc
    try:
        return text, json.loads(text)
    except json.JSONDecodeError as exc:
        msg = f"{path}: not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        raise InvalidInputError(msg, source=str(path)) from exc


def _load_cdf(path: Path) -> list[tuple[int, float]]:
    """A CDF file: a bare ``[[tokens, frac], ...]`` array or an object holding one under ``cdf``."""
    text, data = _read(path)
    if isinstance(data, dict) and "cdf" in data:
        text = json.dumps(data["cdf"])
    points: list[tuple[int, float]] = _validate(_CDF_ADAPTER, text, path)
    return points


def _load(path: Path, args: argparse.Namespace) -> FleetoptWhatIfInput:
    text, data = _read(path)
    if isinstance(data, list) or (isinstance(data, dict) and "arrival_rate_per_s" not in data and "cdf" in data):
        if args.arrival_rate_per_s is None:
            msg = f"{path}: a bare CDF file needs --arrival-rate-per-s"
            raise InvalidInputError(msg, field="arrival_rate_per_s", source=str(path))
        return FleetoptWhatIfInput(arrival_rate_per_s=args.arrival_rate_per_s, cdf=_load_cdf(path))
    loaded: FleetoptWhatIfInput = _validate(FleetoptWhatIfInput, text, path)
    return loaded


def _build(path: Path, what_if: FleetoptWhatIfInput, args: argparse.Namespace) -> tuple[FleetoptInputs, FleetoptParams]:
    points = list(what_if.cdf or []) if what_if.cdf_file is None else _load_cdf(path.parent / what_if.cdf_file)
    overrides: dict[str, object] = {}
    for name, value in what_if.params.model_dump(exclude_none=True).items():
        overrides[name] = tuple(value) if isinstance(value, list) else value
    cli = {"mode": args.mode, "t_slo_s": args.t_slo_s, "b_short_candidates_tokens": args.b_short}
    overrides.update({k: (tuple(v) if isinstance(v, list) else v) for k, v in cli.items() if v is not None})
    if "mode" in overrides:
        overrides["mode"] = PlannerMode(str(overrides["mode"]))
    try:
        params = dataclasses.replace(FleetoptParams(), **overrides)  # type: ignore[arg-type]
        inputs = FleetoptInputs(
            arrival_rate_per_s=args.arrival_rate_per_s or what_if.arrival_rate_per_s,
            cdf=LengthCdf(tokens=tuple(t for t, _ in points), frac=tuple(f for _, f in points)),
            p_c=what_if.p_c if args.p_c is None else args.p_c,
            input_frac=what_if.input_frac,
        )
    except InvalidInputError as exc:
        msg = f"{path}: {exc}"
        raise InvalidInputError(msg, field=exc.field, value=exc.value, source=str(path)) from exc
    return inputs, params


def _ms(value_s: float | None) -> str:
    return "inf" if value_s is None else f"{value_s * 1000:.1f}"


def _table(payload: FleetoptPayload, homo_row: tuple[int, int, int, float, float, float | None]) -> str:
    r, f, i, pr, c = payload.routing, payload.fleet, payload.inputs, payload.predictions, payload.cost
    head = (
        f"{'pool':<12}{'GPUs':>7}{'slots/GPU':>11}{'C_max':>8}{'req/s':>11}{'mu_gpu/s':>10}{'util':>7}"
        f"{'P99 TTFT ms':>13}"
    )
    lines = [
        f"FleetOpt plan (mode {payload.mode}): B_short {r.b_short_tokens}, gamma {r.gamma:.1f} "
        f"(band to {r.gamma_b_tokens}), alpha {i.alpha:.3f}, beta {i.beta:.3f}, p_c {i.p_c:.2f}, "
        f"alpha' {i.alpha_prime:.3f}",
        head,
    ]
    for name, spec, pred in (("short", f.short, pr.short), ("long", f.long, pr.long)):
        lines.append(
            f"{name:<12}{spec.n_gpus:>7}{spec.n_max_slots:>11}{spec.c_max_tokens:>8}{pred.arrival_rate_per_s:>11.2f}"
            f"{pred.mu_gpu_per_s:>10.3f}{pred.util_frac:>7.3f}{_ms(pred.p99_ttft_s):>13}"
        )
    lines.append(f"{'total':<12}{f.short.n_gpus + f.long.n_gpus:>7}")
    n, slots, ctx, rate, util, ttft = homo_row
    lines.append(f"{'homogeneous':<12}{n:>7}{slots:>11}{ctx:>8}{rate:>11.2f}{'':>10}{util:>7.3f}{_ms(ttft):>13}")
    lines.append(
        f"savings {c.savings_frac * 100:.1f}% vs homogeneous; cost ${c.usd_per_hr:,.2f}/h, "
        f"{c.annual_kusd:,.0f} K$/yr; SLO {i.t_slo_s * 1000:.0f} ms met: {'yes' if payload.slo_met else 'no'}"
    )
    return "\n".join(lines)


_WHAT_IF_FLAGS = ("mode", "arrival_rate_per_s", "p_c", "t_slo_s", "b_short")


def _explained(
    path: Path, body: dict[str, Any], args: argparse.Namespace
) -> tuple[Decision[FleetoptPayload, Any], FleetoptInputs, FleetoptParams]:
    """The plan explain's output decides again, its inputs, and the params it was decided with."""
    given = [f"--{name.replace('_', '-')}" for name in _WHAT_IF_FLAGS if getattr(args, name) is not None]
    if given:
        msg = (
            f"{path}: {', '.join(given)} change a what-if input; an explain output is decided again with "
            "its config's params (--config FILE)"
        )
        raise InvalidInputError(msg, field=given[0], source=str(path))
    explained = decide_explained(path, body, "fleetopt", config_path=args.config)
    config = explained.config
    params = FleetoptParams() if config is None else fleetopt_params(config.fleetopt, str(args.config))
    inputs: FleetoptInputs = explained.inputs
    decision: Decision[FleetoptPayload, Any] = explained.decision
    return decision, inputs, params


def run(args: argparse.Namespace) -> int:
    """Plan the fleet for ``args.input`` and print it; returns 0.

    Raises:
        InvalidInputError: when the file is missing, not JSON, or a field is invalid (names file and field).
    """
    path: Path = args.input
    _, data = _read(path)
    if is_explain_output(data):
        decision, inputs, params = _explained(path, data, args)
    else:
        inputs, params = _build(path, _load(path, args), args)
        decision = decide(inputs, None, params, 0.0)
    if args.json:
        print(decision.payload.model_dump_json(indent=2))
        return 0
    homo = homogeneous_fleet(inputs, params)
    homo_row = (
        homo.short.n_gpus,
        homo.short_slots,
        homo.short_ctx_tokens,
        homo.short.arrival_rate_per_s,
        homo.short.util_frac,
        homo.short.p99_ttft_s if homo.short.p99_ttft_s != float("inf") else None,
    )
    print(_table(decision.payload, homo_row))
    return 0
