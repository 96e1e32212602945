"""CLI flags built from ``Settings`` fields and their help text, so there is one definition."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

from services.logs import configure_logging
from services.settings import Settings
from services.stack.launcher import StackState, stack_up


def add_settings_flags(parser: argparse.ArgumentParser, fields: Sequence[str]) -> None:
    """Add ``--<field>`` for each named Settings field, typed as the field, with its description as help.

    A flag of a number field arrives as that number (argparse refuses ``--seed x`` in one line); a
    field of a few literal values lists them as the flag's choices.
    """
    for name in fields:
        info = Settings.model_fields[name]
        kind = _flag_type(info.annotation)
        choices = get_args(kind) if get_origin(kind) is Literal else None
        parser.add_argument(
            f"--{name.replace('_', '-')}",
            dest=name,
            default=None,
            type=str if choices is not None else kind,
            choices=choices,
            metavar=name.upper(),
            help=f"{info.description} (default {info.default})",
        )


def _flag_type(annotation: Any) -> Any:
    """The type a flag parses to: the field's type, or the one that is not None of an optional field."""
    if get_origin(annotation) in {Union, UnionType}:
        (kind,) = [arg for arg in get_args(annotation) if arg is not type(None)]
        return kind
    return annotation


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Build Settings from the parsed flags over the environment, and configure logging from them."""
    settings = Settings.load(vars(args))
    configure_logging(settings.log_format, settings.log_level)
    return settings


def settings_stack(settings: Settings) -> StackState:
    """The local stack in ``settings.state_dir``, started where missing, on the broker ``settings.broker`` names."""
    return stack_up(
        settings.state_dir,
        settings.redis_url,
        None,
        settings.kafka_timeout_s,
        settings.redis_security(),
        broker=settings.broker,
    )
