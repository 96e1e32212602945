"""CLI errors and exit codes: every failure of a command ends as one line on stderr and a non-zero code.

The ``governor`` entry runs each command's handler through ``run_handler``. Errors of the project's
tree (schemas/errors.py) print their message; the third-party errors that reach the entry when a
backend does not answer or a port is taken (kafka-python, redis-py, ``OSError``) are translated
here, at the outermost boundary, into the same tree first. No traceback reaches an operator for an
everyday mistake; anything else is a bug and keeps its traceback.

Exit codes:

====  ==========================================================================
0     the command did what it was asked
1     it ran but failed (events dropped, nothing found, a service caught up late)
2     bad input or settings (``InvalidInputError``, ``ConfigError``)
3     a backend did not answer (``BackendUnavailableError``: Kafka or Redis)
130   interrupted (Ctrl-C)
====  ==========================================================================
"""

from __future__ import annotations

import argparse
import errno
import sys
from collections.abc import Callable

from schemas.errors import BackendUnavailableError, ConfigError, GovernorError, InvalidInputError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_UNAVAILABLE = 3
EXIT_INTERRUPTED = 130


def translate(exc: BaseException) -> GovernorError | None:
    """Return ``exc`` as an error of the project's tree, or None when it is not an everyday failure.

    kafka-python and redis-py are looked up in ``sys.modules`` rather than imported: a command that
    never loaded them cannot have raised their errors, and ``governor --help`` stays fast.
    """
    if isinstance(exc, GovernorError):
        return exc
    kafka_errors = sys.modules.get("kafka.errors")
    if kafka_errors is not None and isinstance(exc, kafka_errors.KafkaError):
        msg = f"kafka did not answer: {exc}"
        return BackendUnavailableError(msg, backend="kafka")
    redis_exceptions = sys.modules.get("redis.exceptions")
    if redis_exceptions is not None and isinstance(exc, redis_exceptions.RedisError):
        msg = f"redis did not answer: {exc}"
        return BackendUnavailableError(msg, backend="redis")
    if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
        msg = f"address already in use: {exc.strerror}"
        return ConfigError(msg)
    return None


def exit_code(exc: GovernorError) -> int:
    """Return the exit code of ``exc`` (see the module docstring)."""
    if isinstance(exc, InvalidInputError | ConfigError):
        return EXIT_BAD_INPUT
    if isinstance(exc, BackendUnavailableError):
        return EXIT_UNAVAILABLE
    return EXIT_FAILED


def one_line(message: str) -> str:
    """Collapse ``message`` to one line (pydantic and kafka messages span several)."""
    return " ".join(part.strip() for part in message.splitlines() if part.strip())


def report(exc: GovernorError) -> int:
    """Print ``governor: error: MESSAGE`` on stderr and return the exit code of ``exc``."""
    print(f"governor: error: {one_line(str(exc))}", file=sys.stderr)
    return exit_code(exc)


def run_handler(handler: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Run a command's handler and turn every everyday failure into one line and an exit code.

    Raises:
        BaseException: whatever ``translate`` does not recognise (a bug: its traceback is wanted).
    """
    try:
        return handler(args)
    except KeyboardInterrupt:
        print("governor: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        known = translate(exc)
        if known is None:
            raise
        return report(known)
