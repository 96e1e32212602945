"""CLI flags built from ``Settings`` fields and their help text, so there is one definition."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from services.logs import configure_logging
from services.settings import Settings


def add_settings_flags(parser: argparse.ArgumentParser, fields: Sequence[str]) -> None:
    """Add ``--<field>`` for each named Settings field, with the field's description as help."""
    for name in fields:
        info = Settings.model_fields[name]
        parser.add_argument(
            f"--{name.replace('_', '-')}",
            dest=name,
            default=None,
            metavar=name.upper(),
            help=f"{info.description} (default {info.default})",
        )


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Build Settings from the parsed flags over the environment, and configure logging from them."""
    settings = Settings.load(vars(args))
    configure_logging(settings.log_format, settings.log_level)
    return settings
