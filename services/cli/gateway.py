"""``governor gateway``: the OpenAI-compatible request path in front of the engines (docs/gateway.md).

Flags are built from ``Settings`` (each also read from ``GOVERNOR_<FIELD>``); logs are JSON lines unless
``--log-format console``. Exit codes follow services/cli/errors.py: 0 on a clean stop, 2 for a bad gateway
file or a taken port.
"""

from __future__ import annotations

import argparse

import structlog

from services.cli.options import add_settings_flags, settings_from_args
from services.gateway.service import run_gateway

log = structlog.get_logger(__name__)

FLAGS = [
    "deployment",
    "kafka_bootstrap",
    "redis_url",
    "redis_timeout_s",
    "log_format",
    "log_level",
    "gateway_host",
    "gateway_port",
    "gateway_id",
    "gateway_config",
    "gateway_max_body_bytes",
    "gateway_upstream_timeout_s",
    "gateway_health_interval_s",
]


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``gateway`` command."""
    parser = commands.add_parser(
        "gateway", help="serve the OpenAI-compatible gateway that obeys admission, FleetOpt and BF-IO"
    )
    add_settings_flags(parser, FLAGS)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run the gateway until SIGINT or SIGTERM."""
    if args.log_format is None:
        args.log_format = "json"
    settings = settings_from_args(args)
    log.info("settings_loaded", **settings.redacted())
    return run_gateway(settings)
