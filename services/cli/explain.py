"""``governor explain KIND SCOPE [--version V]``: one decision as the log recorded it.

Reads ``gov.policy.decisions`` and prints the decision's document: when it was computed and until
when it holds, the inputs digest (the estimate snapshot, its version, the Kafka offsets it folded
up to and the engines it covers), the payload the engines obey, the diagnostics the policy
returned and the clamps the guardrails applied. ``--inputs`` also fetches the estimate snapshot
itself from ``gov.estimates`` and prints the estimates the decision read; ``--json`` prints the
record (and snapshot) as JSON; with ``--inputs`` also the version the decision built on
(``previous``), so ``governor policy KIND --input`` can decide it again from the same state. A
tier's TBT attainment without a TBT SLO reads ``no SLO``. ``governor explain scaling POOL [--seq N]``
explains one of the scaler's actions instead (services/cli/explain_scaling.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping

from pydantic import JsonValue

from schemas.errors import InvalidInputError
from schemas.policy_docs.base import DiagnosticValue
from schemas.records import DecisionRecord, EstimateSnapshot
from services.cli import explain_scaling
from services.cli.options import add_settings_flags, settings_from_args
from services.cli.table import MISSING, aligned
from services.inspection.decisions import find_decision, find_snapshot
from services.settings import Settings
from services.watched_values import parse_document


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``explain`` command."""
    explain = commands.add_parser("explain", help="one decision or scaling action from the log, with its inputs")
    explain.add_argument(
        "kind", help="policy kind (admission, ebplus, slai, bfio, fleetopt), or `scaling` for a scaler's action"
    )
    explain.add_argument("scope", help="engine id, or `fleet` for fleet-scope policies; the pool for `scaling`")
    explain.add_argument("--seq", type=int, default=None, help="scaling: the action's seq (default: the newest)")
    explain.add_argument("--version", type=int, default=None, help="document version (default: the newest)")
    explain.add_argument("--inputs", action="store_true", help="also print the estimate snapshot the decision read")
    explain.add_argument("--json", action="store_true", help="print the record (and snapshot) as JSON")
    add_settings_flags(explain, ["deployment", "kafka_bootstrap", "kafka_timeout_s", "log_format"])
    explain.set_defaults(handler=run)


def _flat(value: JsonValue, prefix: str = "") -> list[tuple[str, str]]:
    """Nested JSON as (dotted path, value) pairs; lists of numbers stay on one line."""
    if isinstance(value, Mapping):
        pairs: list[tuple[str, str]] = []
        for key in sorted(value):
            pairs.extend(_flat(value[key], f"{prefix}.{key}" if prefix else str(key)))
        return pairs
    if isinstance(value, list) and any(isinstance(item, dict | list) for item in value):
        return [pair for i, item in enumerate(value) for pair in _flat(item, f"{prefix}[{i}]")]
    return [(prefix, MISSING if value is None else json.dumps(value))]


NO_SLO = "no SLO"
_NONE_MEANS = {"tbt_attainment_frac.": NO_SLO}  # diagnostic name prefix -> what its None says


def diagnostic_text(name: str, value: DiagnosticValue) -> str:
    """A diagnostic as explain prints it: JSON, except a None whose name says what it means.

    SLAI's per-tier TBT attainment is None for a tier without a TBT SLO (there is nothing to attain,
    and 1.0 would claim every gap met one); it reads ``no SLO``, not ``null``.
    """
    if value is None:
        for prefix, meaning in _NONE_MEANS.items():
            if name.startswith(prefix):
                return meaning
    return json.dumps(value)


def render(record: DecisionRecord, snapshot: EstimateSnapshot | None) -> str:
    """The decision as sections of aligned name/value lines, for people."""
    document = parse_document(record.kind, record.document)
    status = "accepted" if record.accepted else "REFUSED by the compare-and-set (a newer version was stored)"
    inputs = document.inputs
    lines = [
        f"{record.kind} {record.scope} v{record.version} in deployment {record.deployment}: {status}",
        f"computed at t={document.computed_at:.3f} s, valid until t={document.valid_until:.3f} s "
        f"({document.valid_until - document.computed_at:g} s); previous version "
        f"{MISSING if document.previous_version is None else f'v{document.previous_version}'}",
        "",
        "inputs",
        f"  snapshot {inputs.snapshot_id}  estimate versions {json.dumps(inputs.estimate_versions, sort_keys=True)}",
        f"  offsets {', '.join(f'{o.topic}:{o.partition}@{o.offset}' for o in inputs.offsets) or MISSING}",
        f"  engines {', '.join(inputs.engines) or MISSING}",
        "",
        "payload",
        *("  " + line for line in aligned(["FIELD", "VALUE"], _flat(record.document["payload"]))),
        "",
        "diagnostics",
        *(
            "  " + line
            for line in aligned(
                ["NAME", "VALUE"], [(k, diagnostic_text(k, v)) for k, v in sorted(document.diagnostics.items())]
            )
        ),
        "",
    ]
    if document.clamps:
        rows = [(c.name, MISSING if c.decided is None else f"{c.decided:g}", f"{c.pushed:g}") for c in document.clamps]
        lines += ["clamps", *("  " + line for line in aligned(["NAME", "DECIDED", "PUSHED"], rows))]
    else:
        lines.append("clamps: none (every decided value was within its bounds)")
    if snapshot is not None:
        lines += [
            "",
            f"estimates read (snapshot v{snapshot.version} of {snapshot.scope} at t={snapshot.ts:.3f} s, "
            f"trigger {snapshot.trigger})",
            *(
                "  " + line
                for line in aligned(["ESTIMATE", "VALUE"], _flat(snapshot.estimates.model_dump(mode="json")))
            ),
        ]
    return "\n".join(lines)


def _previous(settings: Settings, record: DecisionRecord, version: int) -> DecisionRecord | None:
    """The version the decision built on (its prior state, which ``governor policy --input`` reads); None if gone."""
    try:
        return find_decision(
            settings.kafka_bootstrap,
            deployment=record.deployment,
            kind=record.kind,
            scope=record.scope,
            version=version,
            timeout_s=settings.kafka_timeout_s,
            security=settings.kafka_security(),
        )
    except InvalidInputError:
        print(f"governor: {record.kind} {record.scope} v{version} is no longer on the decisions topic", file=sys.stderr)
        return None


def run(args: argparse.Namespace) -> int:
    """Find the decision and print it; exit 1 when ``--inputs`` asked for a snapshot the log no longer has."""
    if args.kind == "scaling":
        return explain_scaling.run(args)
    settings = settings_from_args(args)
    record = find_decision(
        settings.kafka_bootstrap,
        deployment=settings.deployment,
        kind=args.kind,
        scope=args.scope,
        version=args.version,
        timeout_s=settings.kafka_timeout_s,
        security=settings.kafka_security(),
    )
    snapshot = None
    previous = None
    if args.inputs:
        document = parse_document(record.kind, record.document)
        snapshot_id = document.inputs.snapshot_id
        snapshot = find_snapshot(
            settings.kafka_bootstrap,
            snapshot_id,
            timeout_s=settings.kafka_timeout_s,
            security=settings.kafka_security(),
        )
        if snapshot is None:
            print(f"governor: snapshot {snapshot_id} is no longer on the estimates topic", file=sys.stderr)
        if args.json and document.previous_version is not None:
            previous = _previous(settings, record, document.previous_version)
    if args.json:
        body: dict[str, object] = {"decision": record.model_dump(mode="json")}
        if snapshot is not None:
            body["snapshot"] = snapshot.model_dump(mode="json")
        if previous is not None:
            body["previous"] = previous.model_dump(mode="json")
        print(json.dumps(body, indent=2, sort_keys=True))
    else:
        print(render(record, snapshot))
    return 1 if args.inputs and snapshot is None else 0
