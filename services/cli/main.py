"""Entry point of the ``governor`` command: builds the parser from the command modules and dispatches.

Each command module exposes ``register(subparsers)``, which adds its sub-command and sets a
``handler(args) -> int`` default; ``main`` returns that exit code. Only the module of the command
being run is imported (the others weigh seconds: numpy, scipy, matplotlib, kafka), so
``governor --help`` lists the commands from ``COMMANDS`` alone and answers at once. Every
everyday failure is reported as one line on stderr with a non-zero exit code, never a traceback
(services/cli/errors.py).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from services.cli.errors import run_handler


@dataclass(frozen=True, slots=True, kw_only=True)
class Command:
    """A top-level command: its name, the module whose ``register`` adds it, and its one-line help."""

    name: str
    module: str
    help: str


COMMANDS: tuple[Command, ...] = (
    Command(
        name="demo", module="services.cli.demo", help="run a simulated fleet under live control on the local stack"
    ),
    Command(name="status", module="services.cli.status", help="what every engine is told: documents, acks, lag"),
    Command(
        name="explain",
        module="services.cli.explain",
        help="one decision or scaling action from the log, with its inputs",
    ),
    Command(
        name="record",
        module="services.cli.replay",
        help="write a topic's contents to a JSON-lines file (.gz to compress)",
    ),
    Command(
        name="replay", module="services.cli.replay", help="publish a recorded event file to Kafka, or fold it offline"
    ),
    Command(
        name="run",
        module="services.cli.run",
        help="run a control-plane service (stream processor or policy service)",
    ),
    Command(
        name="schema",
        module="services.cli.schema",
        help="validate event files against the contract; export JSON Schemas",
    ),
    Command(
        name="sim",
        module="services.cli.sim",
        help="run a named simulated fleet, governed (default) or not; write summary.json and plots",
    ),
    Command(
        name="gateway",
        module="services.cli.gateway",
        help="serve the OpenAI-compatible gateway that obeys admission, FleetOpt and BF-IO",
    ),
    Command(
        name="scale",
        module="services.cli.scale",
        help="resize the pools to FleetOpt's plan through KEDA, Kubernetes, local engines or in memory",
    ),
    Command(
        name="fleet",
        module="services.cli.fleet",
        help="run real vLLM CPU servers behind the gateway, governed vs round robin, and compare",
    ),
    Command(name="stack", module="services.cli.stack", help="start, inspect or stop the local broker and Redis"),
    Command(
        name="policy",
        module="services.cli.policy",
        help="what-if: print a policy decision for an estimate snapshot",
    ),
    Command(name="bfio", module="services.cli.bfio_assign", help="BF-IO what-if tools"),
    Command(
        name="config",
        module="services.cli.config",
        help="check a policy configuration file, or apply it to a deployment",
    ),
    Command(
        name="pin",
        module="services.cli.pin",
        help="override payload keys of a policy document for a while; the policy service leaves it alone",
    ),
    Command(
        name="unpin",
        module="services.cli.pin",
        help="remove a pin; the policy service's next decision takes the key back",
    ),
    Command(name="shadow", module="services.cli.shadow", help="compare shadow policies with the live one, or stop one"),
)


def build_parser(command: str | None = None, *, every: bool = False) -> argparse.ArgumentParser:
    """Return the ``governor`` parser with ``command`` (or, with ``every``, each command) registered in full.

    The other commands get a placeholder with their help line, so ``governor --help`` lists them
    and an unknown name is refused with the list of known ones.
    """
    parser = argparse.ArgumentParser(
        prog="governor",
        description="Governor: a streaming control plane for LLM serving fleets.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for entry in COMMANDS:
        if (every or entry.name == command) and entry.name not in commands.choices:
            importlib.import_module(entry.module).register(commands)
    for entry in COMMANDS:
        if entry.name not in commands.choices:
            commands.add_parser(entry.name, help=entry.help)
    return parser


def _command_of(argv: Sequence[str]) -> str | None:
    """The first argument naming a known command (options before it take no values), or None."""
    names = {entry.name for entry in COMMANDS}
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in names else None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``governor`` with ``argv`` (default ``sys.argv[1:]``) and return the exit code."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(_command_of(arguments)).parse_args(arguments)
    return run_handler(args.handler, args)
