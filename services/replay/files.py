"""JSON-lines event files, plain or gzip: the format ``governor record`` writes and ``governor replay`` reads.

One event per line, exactly its wire JSON, so ``governor schema check`` validates the same file.
Reading validates every line and names the file and the line of the first bad one.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

from schemas.errors import InvalidInputError
from schemas.events import Event, encode_event, parse_event


def _open(path: Path, mode: str) -> IO[bytes]:
    if path.suffix == ".gz":
        return gzip.open(path, mode + "b")  # type: ignore[return-value]
    return path.open(mode + "b")


def read_events(path: Path) -> Iterator[Event]:
    """Yield the events of ``path`` in file order.

    Raises:
        InvalidInputError: the file is missing or unreadable, or a line fails the contract
            (the message names the file, the line and the field).
    """
    if not path.is_file():
        msg = f"{path}: no such file"
        raise InvalidInputError(msg, source=str(path))
    try:
        with _open(path, "r") as handle:
            for number, raw in enumerate(handle, start=1):
                if raw.strip():
                    yield parse_event(raw.strip(), source=f"{path}:{number}")
    except (OSError, EOFError) as exc:
        msg = f"{path}: cannot be read ({exc})"
        raise InvalidInputError(msg, source=str(path)) from exc


def write_events(path: Path, events: Iterable[Event]) -> int:
    """Write ``events`` one per line (gzip when the name ends in .gz); return how many."""
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with _open(path, "w") as handle:
        for event in events:
            handle.write(encode_event(event) + b"\n")
            count += 1
    return count


def write_lines(path: Path, lines: Iterable[bytes]) -> int:
    """Write raw JSON lines (records of any topic) to ``path``; return how many."""
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with _open(path, "w") as handle:
        for line in lines:
            handle.write(line.rstrip(b"\n") + b"\n")
            count += 1
    return count
