"""``MemoryStore``: the in-memory ``Store`` of unit tests and of the offline replay."""

from __future__ import annotations

import json
from collections.abc import Mapping

from schemas.names import STREAM_CONSUMER
from services.store.policy_versions import HISTORY_CAP, check_version, stored_version


class MemoryStore:
    """A ``Store`` in dictionaries, with the same compare-and-set rules as ``RedisStore``."""

    def __init__(self, history_cap: int = HISTORY_CAP) -> None:
        self.offsets: dict[str, dict[str, int]] = {}
        self.log_id_map: dict[str, dict[str, str]] = {}
        self.states: dict[str, str] = {}
        self.service_states: dict[str, dict[str, str]] = {}
        self.summaries: dict[str, str] = {}
        self.policies: dict[tuple[str, str], str] = {}
        self.history: dict[tuple[str, str], list[str]] = {}
        self.announcements: list[str] = []
        self.expiries: dict[str, int] = {}
        self._history_cap = history_cap

    def applied_offsets(self, consumer: str) -> dict[str, int]:
        """Return the applied offsets of ``consumer``."""
        return dict(self.offsets.get(consumer, {}))

    def _states(self, consumer: str) -> dict[str, str]:
        """The stream processor's engine states (``states``), or another consumer's own, apart as in Redis."""
        return self.states if consumer == STREAM_CONSUMER else self.service_states.setdefault(consumer, {})

    def load_states(self, consumer: str, scopes: list[str]) -> dict[str, str]:
        """Return the states ``consumer`` stored for ``scopes``."""
        states = self._states(consumer)
        return {scope: states[scope] for scope in scopes if scope in states}

    def load_legacy_states(self, scopes: list[str]) -> dict[str, str]:
        """Return the states of ``scopes`` among the engines' (``states``): the service's old layout was theirs."""
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
        self._states(consumer).update(states)
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
        stored = self._states(consumer)
        stored.update(states)
        for scope in dropped:
            stored.pop(scope, None)

    def estimate_scopes(self, name: str) -> list[str]:
        """Return the scopes with a summary-like estimate ``name`` (keys ``gov:{dep}:est:{scope}:{name}``)."""
        suffix = f":{name}"
        return sorted(key.split(":est:", 1)[1].removesuffix(suffix) for key in self.summaries if key.endswith(suffix))

    def load_values(self, keys: list[str]) -> dict[str, str]:
        """Return the summaries (and other values ``commit`` wrote) of ``keys`` that have one."""
        return {key: self.summaries[key] for key in keys if key in self.summaries}

    def policy_documents(self) -> dict[tuple[str, str], str]:
        """Return every current document by (kind, scope)."""
        return dict(self.policies)

    def get_policy(self, kind: str, scope: str) -> str | None:
        """Return the current document JSON."""
        return self.policies.get((kind, scope))

    def put_policy(self, kind: str, scope: str, version: int, document_json: str) -> bool:
        """Compare-and-set on ``version``; a stored value without a readable version counts as absent.

        Raises:
            InvalidInputError: ``version`` is out of bounds (``check_version``).
        """
        check_version(version)
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
