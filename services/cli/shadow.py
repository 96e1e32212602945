"""``governor shadow report`` and ``governor shadow stop NAME``: shadow policies against the live one.

The report reads ``gov.policy.decisions`` from the start, keeps the deployment's policy decisions
(the live ones, whether written or held by a pin, and each shadow's), and joins a shadow's decision
with the live decision of the same kind and scope taken from the same estimate snapshot (the
``snapshot_id`` of the document's inputs). It prints, per shadow, how many snapshots both decided,
how many decisions differ, per kind and per payload key (with the mean of each numeric key on
both sides), and the snapshots only one side decided (``applies_to`` or data differences).
With ``--simulate SCENARIO`` it also runs the scenario offline under the live configuration and
under each shadow's (services/cli/shadow_sim.py) and prints what the simulator predicts.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from schemas.names import DECISIONS_TOPIC
from schemas.records import DecisionRecord
from services.cli import shadow_scaling
from services.cli.options import add_settings_flags, settings_from_args
from services.inspection.decisions import read_decisions
from services.policy.config import config_policy_set
from services.policy.config_records import LIVE, config_record, publish_configs
from services.settings import Settings

FLAGS = ["deployment", "kafka_bootstrap", "log_format"]
REPORT_FLAGS = [*FLAGS, "fleet_slot_s", "seed"]

Key = tuple[str, str, str]  # kind, scope, snapshot_id


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``shadow`` command group."""
    shadow = commands.add_parser("shadow", help="compare shadow policies with the live one, or stop one")
    sub = shadow.add_subparsers(dest="shadow_command", metavar="COMMAND", required=True)
    report = sub.add_parser("report", help="where each shadow's decisions differ from the live ones, per kind and key")
    report.add_argument("--name", default=None, help="only this shadow (default: every shadow found)")
    report.add_argument("--json", action="store_true", help="print the comparison as JSON")
    report.add_argument(
        "--simulate",
        default=None,
        metavar="SCENARIO",
        help="also run this simulator scenario offline under the live config and each shadow's, and compare",
    )
    report.add_argument("--duration-s", type=float, default=None, help="simulated seconds (default: the scenario's)")
    add_settings_flags(report, REPORT_FLAGS)
    report.set_defaults(handler=run_report)
    stop = sub.add_parser("stop", help="stop shadow NAME (a config record the policy service applies in order)")
    stop.add_argument("name", metavar="NAME")
    add_settings_flags(stop, FLAGS)
    stop.set_defaults(handler=run_stop)
    shadow_scaling.register(sub)


def _flatten(payload: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted key -> leaf value of a payload (lists stay whole)."""
    if not isinstance(payload, dict):
        return {prefix: payload}
    flat: dict[str, Any] = {}
    for key, value in payload.items():
        flat.update(_flatten(value, f"{prefix}.{key}" if prefix else key))
    return flat


@dataclass(slots=True)
class KeyDiff:
    """How one payload key compared over the snapshots both sides decided."""

    differ: int = 0
    live_values: list[float] = field(default_factory=list)
    shadow_values: list[float] = field(default_factory=list)


@dataclass(slots=True)
class KindDiff:
    """How one kind compared: snapshots both decided, how many differ, one-sided, per key."""

    both: int = 0
    differ: int = 0
    live_only: int = 0
    shadow_only: int = 0
    keys: dict[str, KeyDiff] = field(default_factory=lambda: defaultdict(KeyDiff))


def _decisions_by_snapshot(records: list[DecisionRecord]) -> dict[Key, dict[str, Any]]:
    by_snapshot: dict[Key, dict[str, Any]] = {}
    for record in records:
        inputs = record.document.get("inputs")
        snapshot_id = inputs.get("snapshot_id") if isinstance(inputs, dict) else None
        if isinstance(snapshot_id, str):
            by_snapshot[(record.kind, record.scope, snapshot_id)] = _flatten(record.document.get("payload"))
    return by_snapshot


def compare(records: list[DecisionRecord], name: str) -> dict[str, KindDiff]:
    """Per kind, how shadow ``name``'s decisions compare with the live ones on the same snapshots."""
    live = _decisions_by_snapshot([r for r in records if r.origin == "policy" and r.shadow is None])
    shadow = _decisions_by_snapshot([r for r in records if r.shadow == name])
    kinds: dict[str, KindDiff] = defaultdict(KindDiff)
    for key in sorted(live.keys() | shadow.keys()):
        diff = kinds[key[0]]
        if key not in shadow:
            diff.live_only += 1
            continue
        if key not in live:
            diff.shadow_only += 1
            continue
        diff.both += 1
        ours, theirs = live[key], shadow[key]
        differing = [k for k in sorted(ours.keys() | theirs.keys()) if ours.get(k) != theirs.get(k)]
        diff.differ += bool(differing)
        for k in differing:
            diff.keys[k].differ += 1
        for k in ours.keys() & theirs.keys():
            a, b = ours[k], theirs[k]
            if isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool):
                diff.keys[k].live_values.append(float(a))
                diff.keys[k].shadow_values.append(float(b))
    return dict(kinds)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _report_json(name: str, digest: str | None, kinds: dict[str, KindDiff]) -> dict[str, Any]:
    return {
        "shadow": name,
        "config": digest,
        "kinds": {
            kind: {
                "snapshots": d.both,
                "differ": d.differ,
                "live_only": d.live_only,
                "shadow_only": d.shadow_only,
                "keys": {
                    k: {"differ": v.differ, "live_mean": _mean(v.live_values), "shadow_mean": _mean(v.shadow_values)}
                    for k, v in sorted(d.keys.items())
                    if v.differ
                },
            }
            for kind, d in sorted(kinds.items())
        },
    }


def _print_report(name: str, digest: str | None, live_digest: str | None, kinds: dict[str, KindDiff]) -> None:
    both = sum(d.both for d in kinds.values())
    differ = sum(d.differ for d in kinds.values())
    print(
        f"shadow {name} (config {digest or 'defaults'}) vs live (config {live_digest or 'defaults'}): "
        f"{both} snapshots decided by both, {differ} decisions differ"
    )
    print(f"  {'kind':<10} {'snapshots':>9} {'differ':>7} {'live-only':>9} {'shadow-only':>11}")
    for kind, d in sorted(kinds.items()):
        print(f"  {kind:<10} {d.both:>9} {d.differ:>7} {d.live_only:>9} {d.shadow_only:>11}")
    rows = [(kind, k, v) for kind, d in sorted(kinds.items()) for k, v in sorted(d.keys.items()) if v.differ]
    if rows:
        print(f"  {'kind':<10} {'payload key':<28} {'differ':>7} {'live mean':>12} {'shadow mean':>12}")
    for kind, k, v in rows:
        live_mean, shadow_mean = _mean(v.live_values), _mean(v.shadow_values)
        shown_live = "-" if live_mean is None else f"{live_mean:.4g}"
        shown_shadow = "-" if shadow_mean is None else f"{shadow_mean:.4g}"
        print(f"  {kind:<10} {k:<28} {v.differ:>7} {shown_live:>12} {shown_shadow:>12}")


def run_report(args: argparse.Namespace) -> int:
    """Print the comparison of every shadow (or ``--name``) with the live policy; exit 1 without shadows."""
    settings: Settings = settings_from_args(args)
    records = read_decisions(settings.kafka_bootstrap, settings.deployment, settings.kafka_security())
    names = sorted({r.shadow for r in records if r.shadow is not None})
    if args.name is not None:
        names = [n for n in names if n == args.name]
    if not names:
        which = "shadow decisions" if args.name is None else f"decisions of shadow {args.name!r}"
        print(f"no {which} on {DECISIONS_TOPIC} for deployment {settings.deployment}")
        return 1
    live_digests = [r.config for r in records if r.origin == "policy" and r.shadow is None]
    live_digest = live_digests[-1] if live_digests else None
    reports = []
    for name in names:
        digest = next((r.config for r in reversed(records) if r.shadow == name), None)
        kinds = compare(records, name)
        if args.json:
            reports.append(_report_json(name, digest, kinds))
        else:
            _print_report(name, digest, live_digest, kinds)
    prediction = None if args.simulate is None else _predict(args, settings, names)
    if args.json:
        body = {"deployment": settings.deployment, "live_config": live_digest, "shadows": reports}
        print(json.dumps(body | ({} if prediction is None else {"prediction": prediction}), indent=2))
    return 0


def _predict(args: argparse.Namespace, settings: Settings, names: list[str]) -> dict[str, Any]:
    """Run ``--simulate`` under the live config and each shadow's; print the table unless ``--json``."""
    from services.cli.shadow_sim import prediction_table, read_config_records, simulate
    from services.sim import load_scenario
    from services.sim.compare import comparison_rows

    scenario = load_scenario(
        args.simulate, duration_s=args.duration_s, seed=None if args.seed is None else settings.seed
    )
    records = read_config_records(settings.kafka_bootstrap, settings.deployment, settings.kafka_security())
    live = records.get(LIVE)
    policy_sets = {
        LIVE: config_policy_set(
            None if live is None else live.config, source="live", fleet_slot_s=settings.fleet_slot_s
        )
    }
    for name in names:
        record = records.get(name)
        if record is not None and record.config is not None:
            policy_sets[name] = config_policy_set(record.config, source=name, fleet_slot_s=settings.fleet_slot_s)
    arms = simulate(scenario, policy_sets)
    if not args.json:
        print(
            f"simulator prediction: scenario {scenario.name}, seed {scenario.seed}, {scenario.duration_s:g} s, "
            f"offline under each configuration (fleet slot {settings.fleet_slot_s:g} s)"
        )
        print(prediction_table(arms))
    return {
        "scenario": scenario.name,
        "seed": scenario.seed,
        "duration_s": scenario.duration_s,
        "metrics": {
            f"{row.metric} ({row.unit})": dict(zip([arm.name for arm in arms], row.values, strict=True))
            for row in comparison_rows(arms)
        },
    }


def run_stop(args: argparse.Namespace) -> int:
    """Append the record that stops shadow NAME."""
    settings = settings_from_args(args)
    if args.name == LIVE:
        print("'live' is not a shadow; use `governor config apply` to change the live configuration")
        return 2
    publish_configs(
        settings.kafka_bootstrap,
        [config_record(settings.deployment, args.name, None, "")],
        settings.kafka_timeout_s,
        settings.kafka_security(),
    )
    print(
        f"shadow {args.name} of deployment {settings.deployment}: stop recorded; the policy service stops it in order"
    )
    return 0
