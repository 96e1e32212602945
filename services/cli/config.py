"""``governor config check FILE`` and ``governor config apply FILE``: the policy configuration file.

``check`` validates the file and prints what it changes from the defaults and which engines each
policy applies to; ``apply`` appends it to ``gov.estimates`` as the live configuration (or, with
``--shadow NAME``, as shadow NAME), which the running policy service applies in log order.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from services.cli.options import add_settings_flags, settings_from_args
from services.policy.config import PolicyConfig, Section, config_digest, read_config
from services.policy.config_records import LIVE, file_record, publish_configs, shadow_assignment

FLAGS = ["deployment", "kafka_bootstrap", "log_format"]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``config`` command group."""
    config = commands.add_parser("config", help="check a policy configuration file, or apply it to a deployment")
    sub = config.add_subparsers(dest="config_command", metavar="COMMAND", required=True)
    check = sub.add_parser("check", help="validate a policy config file and print what it sets")
    check.add_argument("file", type=Path, metavar="FILE")
    check.set_defaults(handler=run_check)
    apply = sub.add_parser("apply", help="append a policy config to gov.estimates; the policy service applies it")
    apply.add_argument("file", type=Path, metavar="FILE")
    apply.add_argument("--shadow", default=None, metavar="NAME", help="apply it as shadow policy NAME instead")
    add_settings_flags(apply, FLAGS)
    apply.set_defaults(handler=run_apply)


def _set_keys(section: Section, prefix: str) -> list[str]:
    shown = []
    for name, value in section:
        if isinstance(value, Section) and name != "applies_to":
            shown.extend(_set_keys(value, f"{prefix}.{name}"))
        elif value is not None and name != "applies_to":
            shown.append(f"{prefix}.{name}={value}")
    return shown


def describe(config: PolicyConfig) -> list[str]:
    """One line per policy: the keys it sets and the engines it applies to."""
    lines = []
    for kind in ("admission", "ebplus", "slai", "bfio", "fleetopt"):
        section: Section = getattr(config, kind)
        keys = _set_keys(section, kind)
        applies = getattr(section, "applies_to", None)
        scope = "the fleet" if kind == "fleetopt" else "every engine that obeys it"
        if applies is not None:
            scope = (
                ", ".join(f"{what} {values}" for what, values in applies if values is not None)
                or "every engine that obeys it"
            )
        lines.append(f"  {kind:<10} applies to {scope}; sets {', '.join(keys) if keys else 'nothing (defaults)'}")
    return lines


def run_check(args: argparse.Namespace) -> int:
    """Validate FILE; print its digest and, per policy, what it sets and where it applies."""
    config, data = read_config(args.file)
    print(
        f"{args.file}: valid policy config {config_digest(data)}"
        + (f": {config.description}" if config.description else "")
    )
    for line in describe(config):
        print(line)
    return 0


def run_apply(args: argparse.Namespace) -> int:
    """Append FILE as the live configuration (or shadow NAME) of the deployment."""
    settings = settings_from_args(args)
    name = LIVE if args.shadow is None else shadow_assignment(f"{args.shadow}={args.file}")[0]
    record = file_record(settings.deployment, name, args.file)
    publish_configs(settings.kafka_bootstrap, [record], settings.kafka_timeout_s, settings.kafka_security())
    print(f"applied {args.file} (config {record.digest}) as {name} of deployment {settings.deployment}")
    return 0
