"""Reading the scaler's TOML file (docs/scaler.md) into ``ScalerConfig``, with errors that name the file and key."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from schemas.errors import InvalidInputError
from schemas.scaling import ScalerConfig
from services.toml_files import read_toml


def read_scaler_config(path: Path) -> ScalerConfig:
    """Read and validate the scaler's file at ``path``.

    Raises:
        InvalidInputError: the file cannot be read, is not TOML, or does not fit ``ScalerConfig``; the
            message names the file, the key path and the reason.
    """
    data = read_toml(path, "the scaler config")
    try:
        return ScalerConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        field = ".".join(str(part) for part in first["loc"]) or "<file>"
        msg = f"{path}: {field}: {first['msg']}"
        raise InvalidInputError(msg, field=field, source=str(path)) from None
