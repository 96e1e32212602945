"""The compare-and-set rules of a stored policy's version, one copy for every store and its readers.

``RedisStore`` (with put_policy.lua), ``MemoryStore``, the policy service and the checkpoints read a
stored document's version the same way; this module holds that reading so that none of them imports
another store's module for it.
"""

from __future__ import annotations

import json
import math

from schemas.errors import InvalidInputError
from schemas.policy_docs.base import MAX_VERSION

HISTORY_CAP = 50


def stored_version(raw: str | bytes | None) -> int | None:
    """The ``version`` of a stored policy value, or None when there is none or it cannot be read.

    The compare-and-set treats an unreadable value (not JSON, not an object, no numeric version, a
    version outside ``0 <= v <= MAX_VERSION``) as absent, as put_policy.lua does, so one malformed
    key never blocks its scope and a huge version cannot freeze it. A
    fractional version reads as its floor: the next integer version is still above it.
    """
    if raw is None:
        return None
    try:
        body = json.loads(raw)
    except ValueError:
        return None
    version = body.get("version") if isinstance(body, dict) else None
    if isinstance(version, bool) or not isinstance(version, int | float) or not math.isfinite(version):
        return None
    if not 0 <= version <= MAX_VERSION:
        return None
    return math.floor(version)


def check_version(version: int) -> int:
    """Return ``version`` when a policy write may carry it (an integer, 0 <= version <= MAX_VERSION).

    Raises:
        InvalidInputError: out of bounds; the compare-and-set could not compare it exactly.
    """
    if isinstance(version, bool) or not isinstance(version, int) or not 0 <= version <= MAX_VERSION:
        msg = f"policy version must be an integer in [0, {MAX_VERSION}], got {version!r}"
        raise InvalidInputError(msg, field="version", value=version)
    return version
