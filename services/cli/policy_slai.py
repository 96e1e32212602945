"""``governor policy slai --input FILE.json``: the SLAI what-if (docs/policies/slai.md).

Reads one engine's estimate snapshot (``schemas.policy_docs.SlaiWhatIfInput``), runs the pure
``policies.slai.decide`` on it from a cold start with the paper's parameters and any overrides the
file gives, or reads what ``governor explain slai ENGINE --inputs --json`` prints and decides it again
as the policy service did (services/cli/policy_explained.py), and prints the resulting SLAI document:
its payload as JSON with ``--json``, otherwise a readable table of the payload, the diagnostics and
the clamps. A bad file is one line naming the file and the field.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
from pathlib import Path

import pydantic

from policies.decision import Decision
from policies.slai import OffsetMode, PrefillOrder, SlaiInputs, SlaiParams, TierObservation, TierSlo, decide
from schemas.errors import InvalidInputError
from schemas.policy_docs import ClampRecord, InputsDigest, SlaiPolicy, SlaiWhatIfInput
from schemas.policy_docs.slai import SlaiParamsOverride, SlaiPayload, SlaiState
from services.cli.explain import diagnostic_text
from services.cli.policy_explained import add_config_flag, decide_explained, invalid_input, is_explain_output


def register(policy_subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``slai`` sub-command to ``governor policy``."""
    parser = policy_subparsers.add_parser(
        "slai",
        help="SLAI offsets and prefill order for one engine's estimate snapshot",
        description="Decide the SLAI policy document (paper §6-7.1) from an estimate snapshot in FILE.json.",
    )
    parser.add_argument("--input", required=True, type=Path, metavar="FILE.json", help="the estimate snapshot")
    parser.add_argument("--json", action="store_true", help="print the document payload as JSON")
    add_config_flag(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Decide and print; bad input raises ``InvalidInputError`` naming the file and the field."""
    path: Path = args.input
    raw = _read(path)
    try:
        body = json.loads(raw)
    except json.JSONDecodeError as exc:
        msg = f"{path}: not JSON ({exc.msg} at line {exc.lineno})"
        raise InvalidInputError(msg, source=str(path)) from exc
    if is_explain_output(body):
        explained = decide_explained(path, body, "slai", config_path=args.config)
        document = _document(explained.scope, explained.snapshot_id, explained.decision, explained.now_s)
    else:
        document = _what_if(path, raw)
    if args.json:
        print(document.payload.model_dump_json(indent=2))
    else:
        print(_table(document))
    return 0


def _what_if(path: Path, raw: bytes) -> SlaiPolicy:
    """The SLAI document of a what-if input, decided from a cold start."""
    try:
        snapshot = SlaiWhatIfInput.model_validate_json(raw)
    except pydantic.ValidationError as exc:
        raise invalid_input(path, exc) from exc
    try:
        params = _params(snapshot.params)
        inputs = _inputs(snapshot)
    except InvalidInputError as exc:
        msg = f"{path}: {exc}"
        raise InvalidInputError(msg, field=exc.field, value=exc.value, source=str(path)) from exc
    decision = decide(inputs, None, params, snapshot.now_s)
    return _document(snapshot.engine_id, hashlib.sha256(raw).hexdigest()[:16], decision, snapshot.now_s)


def _document(engine_id: str, snapshot_id: str, decision: Decision[SlaiPayload, SlaiState], now_s: float) -> SlaiPolicy:
    return SlaiPolicy(
        scope=engine_id,
        deployment="what-if",
        version=1,
        computed_at=now_s,
        valid_until=now_s + decision.valid_for_s,
        inputs=InputsDigest(snapshot_id=snapshot_id, engines=[engine_id]),
        diagnostics=dict(decision.diagnostics),
        clamps=[ClampRecord(name=c.name, decided=c.decided, pushed=c.pushed) for c in decision.clamps],
        payload=decision.payload,
        state=decision.state,
    )


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        msg = f"{path}: cannot read the input file ({exc.strerror})"
        raise InvalidInputError(msg, field="--input", value=str(path), source=str(path)) from exc


def _params(overrides: SlaiParamsOverride | None) -> SlaiParams:
    if overrides is None:
        return SlaiParams()
    given = overrides.model_dump(exclude_none=True)
    if "offset_mode" in given:
        given["offset_mode"] = OffsetMode(given["offset_mode"])
    if "prefill_order" in given:
        given["prefill_order"] = PrefillOrder(given["prefill_order"])
    if "tier_tbt_s" in given:
        given["tiers"] = tuple(TierSlo(tier=k, tbt_slo_s=v) for k, v in given.pop("tier_tbt_s").items())
    return dataclasses.replace(SlaiParams(), **given)


def _inputs(snapshot: SlaiWhatIfInput) -> SlaiInputs:
    return SlaiInputs(
        tbar_s=snapshot.tbar_s,
        step_time_p99_s=snapshot.step_time_p99_s,
        kv_use_frac=snapshot.kv_use_frac,
        ttft_p50_s=snapshot.ttft_p50_s,
        arrival_rate_per_s=snapshot.arrival_rate_per_s,
        batch_time_a0_s=snapshot.batch_time_a0_s,
        batch_time_a_tok_s_per_token=snapshot.batch_time_a_tok_s_per_token,
        tiers=tuple(
            TierObservation(
                tier=t.tier,
                tbt_p99_s=t.tbt_p99_s,
                tbt_attainment_frac=t.tbt_attainment_frac,
                tbt_samples=t.tbt_samples,
            )
            for t in snapshot.tiers
        ),
    )


def _table(document: SlaiPolicy) -> str:
    rows: list[tuple[str, str]] = [("engine", document.scope)]
    for name, value in document.payload.model_dump().items():
        if isinstance(value, dict):
            rows.extend((f"{name}.{k}", _fmt(v)) for k, v in sorted(value.items()))
        else:
            rows.append((name, _fmt(value)))
    rows.extend(
        (f"diag {k}", _fmt(v) if v is not None else diagnostic_text(k, v))
        for k, v in sorted(document.diagnostics.items())
    )
    rows.extend((f"clamped {c.name}", f"{_fmt(c.decided)} -> {_fmt(c.pushed)}") for c in document.clamps)
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


def _fmt(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)
