"""Content hashes that name estimate snapshots."""

from __future__ import annotations

import hashlib
import json

from pydantic import JsonValue


def snapshot_id(scope: str, version: int, estimates: dict[str, JsonValue]) -> str:
    """Return the content hash that names a snapshot."""
    canonical = json.dumps({"scope": scope, "version": version, "estimates": estimates}, sort_keys=True)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()[:32]
