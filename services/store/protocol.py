"""The ``Store`` seam: Redis in production, memory in tests and offline replay (DESIGN sections 4.3, 5).

Two operations carry the correctness of the whole control plane:

- ``commit`` writes the estimate states a processor folded together with the Kafka offsets they
  fold up to, atomically, and refuses the whole write when any stored offset is already at or past
  the new one (a stale processor after a rebalance cannot overwrite newer state);
- ``put_policy`` is a compare-and-set on the document version: a lower or equal version is refused
  (a stored value with no readable version counts as absent).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol


class Store(Protocol):
    """Where estimates, applied offsets and policy documents live."""

    def applied_offsets(self, consumer: str) -> dict[str, int]:
        """Return ``"topic:partition" -> last applied offset`` for ``consumer`` (empty when new)."""
        ...

    def load_states(self, consumer: str, scopes: list[str]) -> dict[str, str]:
        """Return the state JSON ``consumer`` committed for each of ``scopes`` that has one.

        The stream processor's scopes are engine ids; every other consumer's states live in its own
        namespace, which no engine id reaches (``schemas.names.state_key``).
        """
        ...

    def load_legacy_states(self, scopes: list[str]) -> dict[str, str]:
        """Return the policy service's state of each of ``scopes`` still in the engines' layout it used before.

        That is ``gov:{dep}:est:{scope}:state`` (``schemas.names.legacy_state_key``), the engines'
        layout, read once after an upgrade (services/policy/stored_states.py); a value there may be
        an engine's, named like the scope.
        """
        ...

    def commit(
        self,
        consumer: str,
        offsets: Mapping[str, int],
        states: Mapping[str, str],
        summaries: Mapping[str, str],
        expire_s: Mapping[str, int] | None = None,
    ) -> bool:
        """Atomically write ``states`` (by scope), ``summaries`` (by key) and ``offsets``.

        ``expire_s`` gives a time to live, in seconds, to the state of a scope or the summary of a
        key it names (the others do not expire): estimates of engines gone silent leave the store.

        Returns:
            False, writing nothing, when a stored offset is at or past the one offered.
        """
        ...

    def log_ids(self, consumer: str) -> dict[str, str]:
        """Return ``"topic:partition" -> topic id`` of the logs ``consumer``'s applied offsets refer to."""
        ...

    def record_log_ids(self, consumer: str, log_ids: Mapping[str, str]) -> None:
        """Record the topic id of partitions' logs (first seen, or after a reset)."""
        ...

    def reset_partition(
        self, consumer: str, partition: str, topic_id: str | None, states: Mapping[str, str], dropped: list[str]
    ) -> None:
        """Start ``partition`` over on a new log, atomically: forget its applied offset, record its topic id,
        write the reset ``states`` (by scope) and delete the states of the ``dropped`` scopes."""
        ...

    def estimate_scopes(self, name: str) -> list[str]:
        """Return every scope that has an estimate called ``name`` (``summary``: every engine folded)."""
        ...

    def load_values(self, keys: list[str]) -> dict[str, str]:
        """Return the value of each of ``keys`` (as ``commit`` wrote them under ``summaries``) that has one."""
        ...

    def policy_documents(self) -> dict[tuple[str, str], str]:
        """Return every current policy document of the deployment by (kind, scope)."""
        ...

    def get_policy(self, kind: str, scope: str) -> str | None:
        """Return the current document JSON of (kind, scope), or None."""
        ...

    def put_policy(self, kind: str, scope: str, version: int, document_json: str) -> bool:
        """Compare-and-set: store the document if ``version`` is above the stored one; keep history; announce.

        A stored value without a readable numeric ``version`` (not JSON, not an object, another Redis
        type, a version outside ``0..MAX_VERSION``) counts as absent and is overwritten, so one
        malformed key never blocks its scope.

        Returns:
            False when a newer or equal version is stored (nothing written).

        Raises:
            InvalidInputError: ``version`` is outside ``0..MAX_VERSION`` (schemas/policy_docs/base.py).
        """
        ...

    def policy_history(self, kind: str, scope: str) -> list[str]:
        """Return the capped history of (kind, scope), newest first."""
        ...
