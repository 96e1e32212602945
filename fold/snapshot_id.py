"""Content hashes that name estimate snapshots."""

from __future__ import annotations

import hashlib

from pydantic import BaseModel


def snapshot_id(scope: str, version: int, estimates: BaseModel) -> str:
    """Return the content hash that names a snapshot: scope, version and the summary's JSON."""
    canonical = f"{scope}\n{version}\n{estimates.model_dump_json()}"
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()[:32]
