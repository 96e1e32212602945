"""What a run left on the log and in Redis, and what one uninterrupted pass over the same input gives.

The reference for the policy service is its own record handler (services/policy/handler.py) run once
over the deployment's ``gov.estimates`` in log order, on an in-memory store: the decisions an
uninterrupted service makes from that log. The reference for the stream processor is the pure fold
of the published events.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import redis

from decide.specs import default_registry
from fold.folder import Folder
from schemas.events import Event
from schemas.names import DECISIONS_TOPIC, ESTIMATES_TOPIC, RecordPosition
from schemas.records import DecisionRecord, EstimateSnapshot
from services.cli.shadow import read_decisions
from services.policy.handler import PendingBatch, PolicyHandler
from services.policy.intake import read_record
from services.replay.replay import read_topic
from services.store.memory_store import MemoryStore

Decision = tuple[str, str, int, str]  # kind, scope, version, the document as sorted JSON
Snapshot = tuple[str, int, str]  # scope, version, snapshot id


@dataclass(frozen=True, slots=True)
class LogRecord:
    """A record of ``gov.estimates`` as the handler reads it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


@dataclass
class ListSink:
    """Keeps the handler's records by topic."""

    sent: dict[str, list[bytes]] = field(default_factory=dict)

    def send(self, topic: str, key: bytes | None, value: bytes) -> None:
        self.sent.setdefault(topic, []).append(value)


def _decision(record: DecisionRecord) -> Decision:
    return (record.kind, record.scope, record.version, json.dumps(record.document, sort_keys=True))


def _first_of_each(records: list[DecisionRecord]) -> list[Decision]:
    """Accepted policy decisions, each (kind, scope, version) once, by its last record, in first-seen order."""
    last: dict[tuple[str, str, int], DecisionRecord] = {}
    for record in records:
        if record.origin == "policy" and record.shadow is None:
            last[(record.kind, record.scope, record.version)] = record
    return [_decision(record) for record in last.values() if record.accepted]


def reference_decisions(bootstrap: str, deployment: str) -> list[Decision]:
    """The decisions one uninterrupted pass of the policy service's handler makes from ``gov.estimates``."""
    sink = ListSink()
    handler = PolicyHandler(deployment=deployment, store=MemoryStore(), registry=default_registry(), sink=sink)
    for offset, value in enumerate(read_topic(bootstrap, ESTIMATES_TOPIC)):
        batch = PendingBatch()
        handler.handle(LogRecord(ESTIMATES_TOPIC, 0, offset, None, value), batch)
        handler.apply(batch)
    assert handler.counters.dead_lettered == 0
    return _first_of_each([DecisionRecord.model_validate_json(v) for v in sink.sent.get(DECISIONS_TOPIC, [])])


def logged_decisions(bootstrap: str, deployment: str) -> list[Decision]:
    """The policy's accepted decisions on ``gov.policy.decisions``, each once (a retry may repeat a record)."""
    return _first_of_each(read_decisions(bootstrap, deployment))


def stored_documents(client: redis.Redis, deployment: str) -> dict[tuple[str, str], dict[str, object]]:
    """Every current policy document of ``deployment`` in Redis, by (kind, scope)."""
    prefix = f"gov:{deployment}:policy:"
    documents: dict[tuple[str, str], dict[str, object]] = {}
    for key in client.scan_iter(match=f"{prefix}*", count=1000):
        name = key.decode()[len(prefix) :]
        if name.endswith(":history"):
            continue
        kind, _, scope = name.partition(":")
        raw = client.get(key)
        assert isinstance(raw, bytes)
        documents[(kind, scope)] = json.loads(raw)
    return documents


def logged_snapshots(bootstrap: str, deployment: str) -> list[Snapshot]:
    """The engine-scope snapshots of ``deployment`` on ``gov.estimates``, in log order (replays included)."""
    found: list[Snapshot] = []
    for value in read_topic(bootstrap, ESTIMATES_TOPIC):
        record = read_record(value)
        if isinstance(record, EstimateSnapshot) and record.deployment == deployment and record.scope != "fleet":
            found.append((record.scope, record.version, record.snapshot_id))
    return found


def folded_snapshots(events: list[Event], deployment: str) -> set[Snapshot]:
    """The snapshots the pure fold of ``events`` takes, the fleet contributions it holds back included."""
    folder = Folder(deployment, default_registry())
    taken: set[Snapshot] = set()
    for offset, event in enumerate(events):
        for snapshot in folder.fold(event, RecordPosition("t", 0, offset)):
            taken.add((snapshot.scope, snapshot.version, snapshot.snapshot_id))
    taken.update((s.scope, s.version, s.snapshot_id) for s in folder.release(None))
    return taken


def folded_summaries(events: list[Event], deployment: str) -> dict[str, object]:
    """Each engine's estimate summary after the pure fold of ``events``, parsed."""
    folder = Folder(deployment, default_registry())
    for offset, event in enumerate(events):
        folder.fold(event, RecordPosition("t", 0, offset))
    return {engine: json.loads(folder.summary_json(engine)) for engine in sorted(folder.engines)}
