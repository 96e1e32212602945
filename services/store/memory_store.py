"""``MemoryStore``: the in-memory ``Store`` of unit tests and of the offline replay."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping

HISTORY_CAP = 50


def stored_version(raw: str | bytes | None) -> int | None:
    """The ``version`` of a stored policy value, or None when there is none or it cannot be read.

    The compare-and-set treats an unreadable value (not JSON, not an object, no numeric version)
    as absent, as put_policy.lua does, so one malformed key never blocks its scope (issue 19). A
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
    return math.floor(version)


class MemoryStore:
    """A ``Store`` in dictionaries, with the same compare-and-set rules as ``RedisStore``."""

    def __init__(self, history_cap: int = HISTORY_CAP) -> None:
        self.offsets: dict[str, dict[str, int]] = {}
        self.states: dict[str, str] = {}
        self.summaries: dict[str, str] = {}
        self.policies: dict[tuple[str, str], str] = {}
        self.history: dict[tuple[str, str], list[str]] = {}
        self.announcements: list[str] = []
        self._history_cap = history_cap

    def applied_offsets(self, consumer: str) -> dict[str, int]:
        """Return the applied offsets of ``consumer``."""
        return dict(self.offsets.get(consumer, {}))

    def load_states(self, scopes: list[str]) -> dict[str, str]:
        """Return the stored states of ``scopes``."""
        return {scope: self.states[scope] for scope in scopes if scope in self.states}

    def commit(
        self, consumer: str, offsets: Mapping[str, int], states: Mapping[str, str], summaries: Mapping[str, str]
    ) -> bool:
        """Write all or nothing; refuse when a stored offset is at or past an offered one."""
        stored = self.offsets.setdefault(consumer, {})
        if any(stored.get(tp, -1) >= offset for tp, offset in offsets.items()):
            return False
        stored.update(offsets)
        self.states.update(states)
        self.summaries.update(summaries)
        return True

    def get_policy(self, kind: str, scope: str) -> str | None:
        """Return the current document JSON."""
        return self.policies.get((kind, scope))

    def put_policy(self, kind: str, scope: str, version: int, document_json: str) -> bool:
        """Compare-and-set on ``version``; a stored value without a readable version counts as absent."""
        stored = stored_version(self.policies.get((kind, scope)))
        if stored is not None and stored >= version:
            return False
        self.policies[(kind, scope)] = document_json
        history = self.history.setdefault((kind, scope), [])
        history.insert(0, document_json)
        del history[self._history_cap :]
        self.announcements.append(json.dumps({"kind": kind, "scope": scope, "version": version}))
        return True

    def policy_history(self, kind: str, scope: str) -> list[str]:
        """Return the history, newest first."""
        return list(self.history.get((kind, scope), []))
