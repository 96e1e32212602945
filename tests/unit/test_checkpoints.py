"""services/checkpoints.py: which checkpoint a partition resumes from, and what goes back into the store."""

from __future__ import annotations

import json

from schemas.names import TELEMETRY_TOPIC, Partition
from schemas.records import CheckpointDocument, StateCheckpoint
from services.checkpoints import resume_from_checkpoints, usable
from services.store.memory_store import MemoryStore

FIELD = f"{TELEMETRY_TOPIC}:3"


class Logs:
    """A log view whose topic has ``topic_id`` and whose partitions end at ``end``."""

    def __init__(self, topic_id: str | None, end: int | None = None) -> None:
        self._topic_id = topic_id
        self._end = end

    def highwater(self, partition: Partition) -> int | None:
        return self._end

    def topic_id(self, topic: str) -> str | None:
        return self._topic_id


def _checkpoint(offset: int = 41, topic_id: str | None = "log-a") -> StateCheckpoint:
    return StateCheckpoint(
        deployment="dep",
        consumer="stream",
        topic=TELEMETRY_TOPIC,
        partition=3,
        offset=offset,
        topic_id=topic_id,
        states={"eng-1": '{"state": 1}'},
        values={"gov:dep:est:eng-1:summary": '{"summary": 1}'},
        documents=[CheckpointDocument(kind="ebplus", scope="eng-1", document=json.dumps({"version": 7}))],
    )


def _source(*checkpoints: StateCheckpoint) -> dict[Partition, StateCheckpoint]:
    return {Partition(c.topic, c.partition): c for c in checkpoints}


def test_a_partition_without_an_applied_offset_resumes_with_the_states_values_documents_and_offset() -> None:
    store = MemoryStore()
    resumed = resume_from_checkpoints(
        store, "stream", lambda: _source(_checkpoint()), [Partition(TELEMETRY_TOPIC, 3)], Logs("log-a"), expire_s=60
    )
    assert resumed == [Partition(TELEMETRY_TOPIC, 3)]
    assert store.applied_offsets("stream") == {FIELD: 41}
    assert store.load_states("stream", ["eng-1"]) == {"eng-1": '{"state": 1}'}
    assert store.load_values(["gov:dep:est:eng-1:summary"]) == {"gov:dep:est:eng-1:summary": '{"summary": 1}'}
    assert store.get_policy("ebplus", "eng-1") == json.dumps({"version": 7})
    assert store.expiries["eng-1"] == 60


def test_a_partition_with_an_applied_offset_keeps_it_and_the_source_is_not_read() -> None:
    store = MemoryStore()
    assert store.commit("stream", {FIELD: 5}, {"eng-1": "mine"}, {})

    def never() -> dict[Partition, StateCheckpoint]:
        raise AssertionError("read the checkpoints of a partition Redis holds")

    assert resume_from_checkpoints(store, "stream", never, [Partition(TELEMETRY_TOPIC, 3)], Logs("log-a")) == []
    assert store.applied_offsets("stream") == {FIELD: 5}
    assert store.load_states("stream", ["eng-1"]) == {"eng-1": "mine"}


def test_a_checkpoint_of_another_log_is_not_used() -> None:
    store = MemoryStore()
    resumed = resume_from_checkpoints(
        store, "stream", lambda: _source(_checkpoint()), [Partition(TELEMETRY_TOPIC, 3)], Logs("log-b")
    )
    assert resumed == []
    assert store.applied_offsets("stream") == {}


def test_usable_needs_the_same_topic_id_where_both_are_known_and_an_offset_below_the_end() -> None:
    assert usable(_checkpoint(topic_id="log-a"), "log-a", None)
    assert usable(_checkpoint(topic_id=None), "log-a", 100)
    assert not usable(_checkpoint(topic_id="log-a"), "log-b", None)
    assert not usable(_checkpoint(offset=41), "log-a", 41)
    assert usable(_checkpoint(offset=41), "log-a", 42)


def test_no_source_resumes_nothing() -> None:
    store = MemoryStore()
    assert resume_from_checkpoints(store, "stream", None, [Partition(TELEMETRY_TOPIC, 3)], Logs("log-a")) == []
