"""structlog configured once, from the CLI entry: JSON lines for services, console for commands."""

from __future__ import annotations

import logging
import sys

import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def configure_logging(log_format: str, log_level: str = "info") -> None:
    """Configure structlog and the stdlib root logger (kafka-python logs through it).

    Loggers are not cached on first use, so a later configuration reaches every module's logger: a
    command run in-process after another (tests, ``structlog.testing.capture_logs``) would otherwise
    keep writing through the first one's processors. The services log per batch and per decision,
    never per event, so the lookup this costs does not show.

    Args:
        log_format: ``json`` (one JSON object per line, for services) or ``console`` (humans).
        log_level: the lowest level written.
    """
    level = _LEVELS[log_level]
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.typing.Processor
    if log_format == "json":
        renderer = structlog.processors.JSONRenderer()
        shared += [structlog.stdlib.add_logger_name, structlog.processors.format_exc_info]
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.make_filtering_bound_logger(level),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer], foreign_pre_chain=shared
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(max(level, logging.INFO) if log_level != "debug" else level)
    for noisy in ("kafka",):
        logging.getLogger(noisy).setLevel(logging.WARNING)
