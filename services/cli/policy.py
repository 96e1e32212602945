"""``governor policy POLICY``: the what-if group, one sub-command per paper policy."""

from __future__ import annotations

import argparse

from services.cli import policy_bfio, policy_ebplus, policy_fleetopt, policy_slai


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``policy`` command group with its four policies."""
    policy = commands.add_parser("policy", help="what-if: print a policy decision for an estimate snapshot")
    policy_commands = policy.add_subparsers(dest="policy", metavar="POLICY", required=True)
    policy_ebplus.register(policy_commands)
    policy_slai.register(policy_commands)
    policy_fleetopt.register(policy_commands)
    policy_bfio.register(policy_commands)
