"""The stream processor's side of the log-reset rule (services/log_reset.py): rebuild a partition.

A ``gov.telemetry`` partition found on a new log is read again from that log's beginning, and the
engines whose telemetry it carries start over with empty estimates, so what is folded from now on
is a function of the new log alone. Which engines those are: every engine the processor holds for
the partition in memory, and every engine with a summary in Redis that the engine rule the SDK
publishes with (services/engine_partitions.py) puts on it.

Each reset engine keeps two things of its old state:

- its snapshot version: snapshots taken from the new log continue the version sequence the policy
  service has seen, where a restart from version 1 would be skipped as duplicates of old snapshots
  (decide/from_snapshot.py) and freeze the engine's policies until the old count was passed;
- its registration (``EngineRegistered``: model, capacity), which an engine sends once at start
  and would not send again to a log that lost it.

Policy documents are not touched: each stays valid until its ``valid_until`` or until a decision
from the new log replaces it (docs/operations.md, "Log resets").
"""

from __future__ import annotations

import json
from typing import Any

import structlog
from pydantic import ValidationError

from fold.engine_estimates import EngineEstimates
from schemas.estimates import EngineRegistration
from schemas.names import Partition
from services.engine_partitions import engine_partition
from services.log_reset import LogReset
from services.store.protocol import Store
from services.stream.batches import CONSUMER_NAME, SUMMARY_NAME, TelemetryBatches

log = structlog.get_logger(__name__)


def reset_state(engine_id: str, stored: str | None, snapshot_version: int) -> str:
    """An empty estimate state for ``engine_id`` that keeps its registration and snapshot version."""
    fresh = EngineEstimates(engine_id)
    fresh.snapshot_version = snapshot_version
    old = _readable(stored)
    if old is not None:
        fresh.snapshot_version = max(snapshot_version, int(old.get("snapshot_version", 0)))
        fresh.engine = _registration(old.get("engine"))
    return json.dumps(fresh.to_dict(), separators=(",", ":"))


def _registration(stored: object) -> EngineRegistration | None:
    """The stored registration; None when there is none or it cannot be read (the reset loses only that)."""
    if not isinstance(stored, dict) or not stored:
        return None
    try:
        return EngineRegistration.model_validate(stored)
    except ValidationError:
        return None


def _readable(stored: str | None) -> dict[str, Any] | None:
    """The stored state as a dict with what a reset keeps, or None when there is none or it cannot be read.

    A reset replaces the state anyway; a malformed one only loses what it could not say.
    """
    if stored is None:
        return None
    try:
        old = json.loads(stored)
        if isinstance(old, dict) and isinstance(old.get("engine", {}), dict):
            int(old.get("snapshot_version", 0))
            return old
    except (ValueError, TypeError):
        return None
    return None


def rebuild_partition(batches: TelemetryBatches, store: Store, reset: LogReset, partitions: int) -> list[str]:
    """Forget the partition's folded state and applied offset, reset its engines; return the engines reset.

    The caller then reads the partition from the new log's beginning.
    """
    in_memory = batches.forget_partition(Partition(reset.topic, reset.partition))
    stored_engines = [
        engine
        for engine in store.estimate_scopes(SUMMARY_NAME)
        if partitions > 0 and engine_partition(engine, partitions) == reset.partition
    ]
    engines = sorted(set(stored_engines) | set(in_memory))
    stored = store.load_states(CONSUMER_NAME, engines)
    states = {engine: reset_state(engine, stored.get(engine), in_memory.get(engine, 0)) for engine in engines}
    store.reset_partition(CONSUMER_NAME, reset.field, reset.topic_id, states, [])
    log.warning(
        "partition_rebuilding",
        topic=reset.topic,
        partition=reset.partition,
        engines_reset=len(engines),
        from_offset=0,
    )
    return engines
