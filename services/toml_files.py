"""Reading an operator's TOML file (the policy configuration, the scaler's pools) with one-line errors."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from schemas.errors import InvalidInputError


def read_toml(path: Path, what: str) -> dict[str, Any]:
    """Return the tables of the TOML file at ``path``, ``what`` naming the file in errors ("the policy config").

    Raises:
        InvalidInputError: the file cannot be read or is not TOML; the message names the file and the reason.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        msg = f"{path}: cannot read {what}: {exc.strerror or exc}"
        raise InvalidInputError(msg, source=str(path)) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = f"{path}: not valid TOML: {exc}"
        raise InvalidInputError(msg, source=str(path)) from None
