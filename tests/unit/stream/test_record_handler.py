"""No record of any shape stops the stream processor: each bad one becomes a dead letter with its code.

``read_record`` is the edge between a consumed record and the fold; ``TelemetryBatches.process``
runs it for every record of a batch. Hypothesis feeds both arbitrary bytes and record shapes.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from decide.specs import default_registry
from schemas.errors import InputErrorCode
from schemas.events import MAX_EVENT_BYTES, encode_event
from schemas.names import DEADLETTER_TOPIC, TELEMETRY_TOPIC
from schemas.records import DeadLetter
from services.health import ServiceMetrics
from services.store.memory_store import MemoryStore
from services.stream.batches import TelemetryBatches, read_record
from services.testing.memory_source import MemoryRecord as Record
from services.testing.streams import synthetic_stream
from tests.unit.stream.fakes import Consumer, KeptProducer

VALID = [encode_event(event) for event in synthetic_stream(engines=1, requests=20, seed=5)]
WRONG_TYPED = [["not", "this"], {"field": None}]  # a wrong type for every field of every event

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def _wrong_typed(pick: int) -> bytes:
    """A valid event with one field (any, the envelope's included) given a value of the wrong type."""
    data: dict[str, Any] = json.loads(VALID[pick % len(VALID)])
    name = sorted(data)[pick % len(data)]
    data[name] = WRONG_TYPED
    return json.dumps(data).encode()


BAD_VALUES: st.SearchStrategy[tuple[object, frozenset[InputErrorCode]]] = st.one_of(
    st.just((None, frozenset({"no_value"}))),
    st.binary(max_size=300).map(lambda b: (b, frozenset({"not_json", "contract"}))),
    st.binary(max_size=100).map(lambda b: (b"\xff\xfe" + b, frozenset({"not_json"}))),
    st.integers(1, 5000).map(lambda n: (VALID[0] + b" " * (MAX_EVENT_BYTES + n), frozenset({"oversized"}))),
    st.integers(0, 10_000).map(lambda pick: (_wrong_typed(pick), frozenset({"contract"}))),
    json_values.map(lambda v: (json.dumps(v).encode(), frozenset({"contract"}))),
    st.one_of(st.integers(), st.floats(), st.lists(st.integers(), max_size=3)).map(
        lambda v: (v, frozenset({"not_json"}))
    ),
)
KEYS = st.one_of(st.none(), st.binary(max_size=40), st.text(max_size=10))


@settings(max_examples=400, deadline=None)
@given(bad=BAD_VALUES, key=KEYS, partition=st.integers(0, 63), offset=st.integers(0, 2**62))
def test_read_record_never_raises_and_dead_letters_every_bad_value_with_its_code(
    bad: tuple[object, frozenset[InputErrorCode]], key: object, partition: int, offset: int
) -> None:
    value, codes = bad
    read = read_record(Record(TELEMETRY_TOPIC, partition, offset, key, value))  # type: ignore[arg-type]
    assert isinstance(read, DeadLetter)
    assert read.code in codes
    assert read.reason
    assert (read.source.topic, read.source.partition, read.source.offset) == (TELEMETRY_TOPIC, partition, offset)
    assert DeadLetter.model_validate_json(read.model_dump_json()) == read


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    bad=st.lists(st.tuples(BAD_VALUES, KEYS, st.integers(0, len(VALID))), min_size=1, max_size=12),
)
def test_a_batch_with_bad_records_anywhere_folds_every_valid_event_and_dead_letters_each_bad_one(
    bad: list[tuple[tuple[object, frozenset[InputErrorCode]], object, int]],
) -> None:
    values: list[tuple[object, object, frozenset[InputErrorCode] | None]] = [(v, b"eng-0", None) for v in VALID]
    for (value, codes), key, at in sorted(bad, key=lambda b: -b[2]):
        values.insert(at, (value, key, codes))
    records = [Record(TELEMETRY_TOPIC, 0, offset, key, value) for offset, (value, key, _) in enumerate(values)]  # type: ignore[arg-type]
    producer = KeptProducer()
    metrics = ServiceMetrics("stream", "dep")
    batches = TelemetryBatches(
        deployment="dep",
        store=MemoryStore(),
        registry=default_registry(),
        producer=producer,  # type: ignore[arg-type]
        consumer=Consumer(),
        metrics=metrics,
        commit_interval_s=3600.0,
    )
    batches.process(records)
    assert batches.commit()
    letters = [DeadLetter.model_validate_json(v) for topic, v in producer.sent if topic == DEADLETTER_TOPIC]
    expected = {offset: codes for offset, (_, _, codes) in enumerate(values) if codes is not None}
    assert {letter.source.offset: letter.code for letter in letters}.keys() == expected.keys()
    assert all(letter.code in expected[letter.source.offset] for letter in letters)
    assert batches.counters.folded == len(VALID)
    assert batches.counters.dead_lettered == len(bad)
    exported = sum(
        sample.value
        for family in metrics.registry.collect()
        if family.name == "governor_dead_letters"
        for sample in family.samples
        if sample.name.endswith("_total")
    )
    assert exported == len(bad)
