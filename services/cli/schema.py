"""``governor schema check FILE`` and ``governor schema export``: the event contract at the command line."""

from __future__ import annotations

import argparse
import gzip
import sys
from collections.abc import Iterator
from pathlib import Path

from schemas.errors import InvalidInputError
from schemas.events import parse_event
from schemas.json_schemas import write_json_schemas

MAX_REPORTED_ERRORS = 1000


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``schema`` command group."""
    schema = commands.add_parser("schema", help="validate event files against the contract; export JSON Schemas")
    sub = schema.add_subparsers(dest="schema_command", metavar="COMMAND", required=True)
    check = sub.add_parser("check", help="validate a JSON-lines event file (.jsonl or .jsonl.gz)")
    check.add_argument("file", type=Path, help="JSON-lines file, one event per line")
    check.set_defaults(handler=run_check)
    export = sub.add_parser("export", help="regenerate the JSON Schema files")
    export.add_argument("--dir", type=Path, default=Path("schemas/json"), help="output folder (default schemas/json)")
    export.set_defaults(handler=run_export)


def _lines(path: Path) -> Iterator[bytes]:
    if not path.is_file():
        msg = f"{path}: no such file"
        raise InvalidInputError(msg, source=str(path))
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as handle:
            yield from handle
    except (OSError, EOFError) as exc:
        msg = f"{path}: cannot be read ({exc})"
        raise InvalidInputError(msg, source=str(path)) from exc


def run_check(args: argparse.Namespace) -> int:
    """Validate every line; print a count when all are valid, else each bad line's number, field and reason."""
    path: Path = args.file
    valid = 0
    bad = 0
    for number, raw in enumerate(_lines(path), start=1):
        if not raw.strip():
            continue
        try:
            parse_event(raw.strip())
        except InvalidInputError as exc:
            bad += 1
            if bad <= MAX_REPORTED_ERRORS:
                print(f"{path}:{number}: {exc.field or '<event>'}: {str(exc).split(': ', 1)[-1]}", file=sys.stderr)
            continue
        valid += 1
    if bad:
        more = f" (first {MAX_REPORTED_ERRORS} shown)" if bad > MAX_REPORTED_ERRORS else ""
        print(f"{path}: {bad} invalid, {valid} valid{more}", file=sys.stderr)
        return 1
    print(f"{path}: {valid} events valid")
    return 0


def run_export(args: argparse.Namespace) -> int:
    """Write the JSON Schema files and list them."""
    for path in write_json_schemas(args.dir):
        print(path)
    return 0
