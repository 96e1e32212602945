"""``governor shadow scaling NAME --config SCALER.toml``: what a shadow's FleetOpt plans would do to the pools.

Reads ``gov.policy.decisions`` from the start and replays, through an advisory scaler with the
operator's pools and limits (services/scaler/shadow.py), the FleetOpt documents the live
configuration wrote and those shadow NAME decided, each in log order. It prints, per pool, both
sides' scale actions, final replicas and GPU-hours over the plans, then the shadow's actions one by
one; ``--json`` prints the same as JSON. Nothing is resized and nothing is published.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pydantic import ValidationError

from schemas.errors import InvalidInputError
from schemas.policy_docs.fleetopt import FleetoptPolicy
from schemas.records import DecisionRecord
from services.cli.options import add_settings_flags, settings_from_args
from services.cli.table import aligned
from services.inspection.decisions import read_decisions
from services.scaler.config import read_scaler_config
from services.scaler.shadow import SHADOW_SCALER_PREFIX, ReplayedTrace, replay_plans

FLAGS = ["deployment", "kafka_bootstrap", "log_format"]


def register(shadow_commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``scaling`` to the ``governor shadow`` group."""
    scaling = shadow_commands.add_parser(
        "scaling", help="the scale actions shadow NAME's FleetOpt plans would cause, beside the live plans'"
    )
    scaling.add_argument("name", metavar="NAME")
    scaling.add_argument("--config", type=Path, required=True, help="the scaler's pools (TOML, docs/scaler.md)")
    scaling.add_argument("--json", action="store_true", help="print both traces as JSON")
    add_settings_flags(scaling, FLAGS)
    scaling.set_defaults(handler=run)


def fleetopt_documents(records: list[DecisionRecord], scope: str, shadow: str | None) -> list[FleetoptPolicy]:
    """The FleetOpt documents of ``scope``, in log order: those written (shadow None) or shadow ``shadow``'s."""
    documents = []
    for record in records:
        if record.kind != "fleetopt" or record.scope != scope or record.shadow != shadow:
            continue
        if shadow is None and not record.accepted:
            continue
        try:
            documents.append(FleetoptPolicy.model_validate(record.document))
        except ValidationError:
            continue
    return documents


def _count(trace: ReplayedTrace, pool: str) -> int:
    return sum(1 for a in trace.actions if a.pool == pool)


def _summary(trace: ReplayedTrace) -> dict[str, object]:
    return {
        "plans": trace.plans,
        "actions": len(trace.actions),
        "final_replicas": trace.final_replicas,
        "gpu_hours": {pool: round(seconds / 3600.0, 4) for pool, seconds in trace.gpu_seconds.items()},
    }


def run(args: argparse.Namespace) -> int:
    """Print both traces; exit 0, or 2 (one line) when shadow NAME decided no FleetOpt plan."""
    settings = settings_from_args(args)
    config = read_scaler_config(args.config)
    records = read_decisions(settings.kafka_bootstrap, settings.deployment, settings.kafka_security())
    shadow_documents = fleetopt_documents(records, config.scope, args.name)
    if not shadow_documents:
        msg = f"shadow {args.name!r} decided no FleetOpt plan of scope {config.scope!r} in {settings.deployment!r}"
        raise InvalidInputError(msg, field="name", value=args.name)
    live = replay_plans(config, settings.deployment, fleetopt_documents(records, config.scope, None), scaler_id="live")
    shadow = replay_plans(config, settings.deployment, shadow_documents, scaler_id=f"{SHADOW_SCALER_PREFIX}{args.name}")
    if args.json:
        body = {
            "live": _summary(live),
            "shadow": {"name": args.name, **_summary(shadow)},
            "shadow_actions": [a.model_dump(mode="json") for a in shadow.actions],
        }
        print(json.dumps(body, indent=2, sort_keys=True))
        return 0
    print(f"plans: live {live.plans}, shadow {args.name} {shadow.plans}")
    rows = [
        [
            pool,
            f"{_count(live, pool)} / {_count(shadow, pool)}",
            f"{live.final_replicas[pool]} / {shadow.final_replicas[pool]}",
            f"{live.gpu_seconds[pool] / 3600.0:.3f} / {shadow.gpu_seconds[pool] / 3600.0:.3f}",
        ]
        for pool in sorted(config.pools)
    ]
    print("\n".join(aligned(["POOL", "ACTIONS live/shadow", "REPLICAS live/shadow", "GPU-HOURS live/shadow"], rows)))
    for action in shadow.actions:
        print(
            f"  {action.ts:.1f}  {action.pool}  {action.from_replicas} -> {action.to_replicas}  "
            f"{action.reason}  (plan v{action.plan_version})"
        )
    return 0
