"""Entry point of the ``governor`` command: builds the parser from the command modules and dispatches.

Each command module exposes ``register(subparsers)``, which adds its sub-command and sets a
``handler(args) -> int`` default; ``main`` returns that exit code. Bad input is reported as one
clear line on stderr with exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from schemas.errors import GovernorError, InvalidInputError
from services.cli import (
    bfio_assign,
    config,
    demo,
    pin,
    policy_bfio,
    policy_ebplus,
    policy_fleetopt,
    policy_slai,
    replay,
    run,
    schema,
    shadow,
    sim,
    stack,
)


def build_parser() -> argparse.ArgumentParser:
    """Return the full ``governor`` parser with every command group registered."""
    parser = argparse.ArgumentParser(
        prog="governor",
        description="Governor: a streaming control plane for LLM serving fleets.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    demo.register(commands)
    replay.register(commands)
    run.register(commands)
    schema.register(commands)
    sim.register(commands)
    stack.register(commands)
    policy = commands.add_parser("policy", help="what-if: print a policy decision for an estimate snapshot")
    policy_commands = policy.add_subparsers(dest="policy", metavar="POLICY", required=True)
    policy_ebplus.register(policy_commands)
    policy_slai.register(policy_commands)
    policy_fleetopt.register(policy_commands)
    policy_bfio.register(policy_commands)
    bfio_assign.register(commands)
    config.register(commands)
    pin.register(commands)
    shadow.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``governor`` with ``argv`` (default ``sys.argv[1:]``) and return the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
    except InvalidInputError as exc:
        print(f"governor: error: {exc}", file=sys.stderr)
        return 2
    except GovernorError as exc:
        print(f"governor: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return code
