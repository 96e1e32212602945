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
        self.log_id_map: dict[str, dict[str, str]] = {}
        self.states: dict[str, str] = {}
        self.summaries: dict[str, str] = {}
        self.policies: dict[tuple[str, str], str] = {}
        self.history: dict[tuple[str, str], list[str]] = {}
        self.announcements: list[str] = []
        self.expiries: dict[str, int] = {}
        self._history_cap = history_cap

    def applied_offsets(self, consumer: str) -> dict[str, int]:
        """Return the applied offsets of ``consumer``."""
        return dict(self.offsets.get(consumer, {}))

    def load_states(self, scopes: list[str]) -> dict[str, str]:
        """Return the stored states of ``scopes``."""
        return {scope: self.states[scope] for scope in scopes if scope in self.states}

    def commit(
        self,
        consumer: str,
        offsets: Mapping[str, int],
        states: Mapping[str, str],
        summaries: Mapping[str, str],
        expire_s: Mapping[str, int] | None = None,
    ) -> bool:
        """Write all or nothing; refuse when a stored offset is at or past an offered one.

        Times to live are recorded in ``expiries`` (nothing here expires by itself).
        """
        stored = self.offsets.setdefault(consumer, {})
        if any(stored.get(tp, -1) >= offset for tp, offset in offsets.items()):
            return False
        stored.update(offsets)
        self.states.update(states)
        self.summaries.update(summaries)
        for name in [*states, *summaries]:
            ttl = (expire_s or {}).get(name, 0)
            if ttl > 0:
                self.expiries[name] = ttl
            else:
                self.expiries.pop(name, None)
        return True

    def log_ids(self, consumer: str) -> dict[str, str]:
        """Return the recorded topic ids of ``consumer``'s partitions."""
        return dict(self.log_id_map.get(consumer, {}))

    def record_log_ids(self, consumer: str, log_ids: Mapping[str, str]) -> None:
        """Record topic ids."""
        self.log_id_map.setdefault(consumer, {}).update(log_ids)

    def reset_partition(
        self, consumer: str, partition: str, topic_id: str | None, states: Mapping[str, str], dropped: list[str]
    ) -> None:
        """Forget the partition's applied offset, record its topic id, write and drop states."""
        self.offsets.get(consumer, {}).pop(partition, None)
        if topic_id is not None:
            self.log_id_map.setdefault(consumer, {})[partition] = topic_id
        self.states.update(states)
        for scope in dropped:
            self.states.pop(scope, None)

    def estimate_scopes(self, name: str) -> list[str]:
        """Return the scopes with a summary-like estimate ``name`` (keys ``gov:{dep}:est:{scope}:{name}``)."""
        suffix = f":{name}"
        return sorted(key.split(":est:", 1)[1].removesuffix(suffix) for key in self.summaries if key.endswith(suffix))

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
