"""Reading the JSON input files of ``governor policy ... --input`` and ``governor bfio assign``.

Every failure is an ``InvalidInputError`` whose message names the file and the reason (and, for a field that
fails the contract, the field's dotted path), so the CLI prints one line and exits 2 instead of a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from schemas.errors import InvalidInputError

ModelT = TypeVar("ModelT", bound=BaseModel)


def read_input_text(path: Path) -> str:
    """The text of the input file at ``path``.

    Raises:
        InvalidInputError: the file is missing or unreadable.
    """
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        msg = f"{path}: cannot read input file ({exc.strerror})"
        raise InvalidInputError(msg, source=str(path)) from exc


def read_json(path: Path) -> object:
    """The JSON value of the input file at ``path``.

    Raises:
        InvalidInputError: the file is missing, unreadable or not JSON.
    """
    text = read_input_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        msg = f"{path}: not JSON ({exc.msg} at line {exc.lineno})"
        raise InvalidInputError(msg, source=str(path)) from exc


def read_json_input(path: Path, model: type[ModelT]) -> ModelT:
    """The input file at ``path`` validated as ``model``.

    Raises:
        InvalidInputError: the file is missing or unreadable, is not JSON, or a field fails validation;
            the message names the file, the field path and the reason.
    """
    text = read_input_text(path)
    try:
        return model.model_validate_json(text)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(part) for part in error["loc"]) or "(document)"
        msg = f"{path}: field {field}: {error['msg']}"
        raise InvalidInputError(msg, field=field, value=error.get("input"), source=str(path)) from exc
