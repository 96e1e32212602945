"""Input checks and serialisation headers shared by every estimator.

An estimator refuses bad input with ``InvalidInputError`` naming the field and the value, and
refuses a serialised state of another format version the same way (schemas/errors.py).
"""

from __future__ import annotations

import math
from typing import Any

from schemas.errors import InvalidInputError


def require_finite(field: str, value: float) -> float:
    """Return ``value`` as a float, or raise ``InvalidInputError`` when it is NaN or infinite."""
    x = float(value)
    if not math.isfinite(x):
        msg = f"{field} must be finite, got {value!r}"
        raise InvalidInputError(msg, field=field, value=value)
    return x


def require_nonnegative(field: str, value: float) -> float:
    """Return ``value`` as a float, or raise ``InvalidInputError`` unless it is finite and >= 0."""
    x = require_finite(field, value)
    if x < 0.0:
        msg = f"{field} must be >= 0, got {value!r}"
        raise InvalidInputError(msg, field=field, value=value)
    return x


def require_positive(field: str, value: float) -> float:
    """Return ``value`` as a float, or raise ``InvalidInputError`` unless it is finite and > 0."""
    x = require_finite(field, value)
    if x <= 0.0:
        msg = f"{field} must be > 0, got {value!r}"
        raise InvalidInputError(msg, field=field, value=value)
    return x


def require_count(field: str, value: int, *, minimum: int = 0) -> int:
    """Return ``value`` when it is an int (not a bool) >= ``minimum``, else raise ``InvalidInputError``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        msg = f"{field} must be an integer >= {minimum}, got {value!r}"
        raise InvalidInputError(msg, field=field, value=value)
    return value


def require_fraction(field: str, value: float) -> float:
    """Return ``value`` when it lies in [0, 1], else raise ``InvalidInputError``."""
    x = require_finite(field, value)
    if not 0.0 <= x <= 1.0:
        msg = f"{field} must lie in [0, 1], got {value!r}"
        raise InvalidInputError(msg, field=field, value=value)
    return x


def check_format(data: object, *, kind: str, version: int, older: tuple[int, ...] = ()) -> dict[str, Any]:
    """Return ``data`` as a JSON object after checking its ``kind`` and ``format`` keys.

    ``older`` lists earlier format versions the caller still reads (it tells them apart by ``format``).

    JSON states are the one place an estimator handles ``dict[str, Any]``: they are decoded
    straight into typed fields by each ``from_dict``.

    Raises:
        InvalidInputError: ``data`` is not a dict, or names another kind or format version.
    """
    if not isinstance(data, dict):
        msg = f"{kind} state must be a JSON object, got {type(data).__name__}"
        raise InvalidInputError(msg, field="state", value=data)
    if data.get("kind") != kind:
        msg = f"kind must be {kind!r}, got {data.get('kind')!r}"
        raise InvalidInputError(msg, field="kind", value=data.get("kind"))
    if data.get("format") != version and data.get("format") not in older:
        msg = f"format of {kind} must be {version}, got {data.get('format')!r}"
        raise InvalidInputError(msg, field="format", value=data.get("format"))
    return data
