"""The engine rule spreads a numbered fleet evenly over the partitions, where Kafka's hash did not."""

from __future__ import annotations

import collections

import pytest
from kafka.partitioner import murmur2

from services.engine_partitions import EnginePartitioner, engine_partition, key_partition


def _loads(engines: list[str], partitions: int) -> list[int]:
    counts = collections.Counter(engine_partition(engine, partitions) for engine in engines)
    return [counts[p] for p in range(partitions)]


@pytest.mark.parametrize(("engines", "partitions"), [(8, 8), (8, 4), (16, 8), (100, 8), (7, 4), (3, 8)])
def test_a_numbered_fleet_loads_every_partition_within_one_engine(engines: int, partitions: int) -> None:
    loads = _loads([f"engine-{n}" for n in range(engines)], partitions)
    assert max(loads) - min(loads) <= 1
    assert sum(loads) == engines


def test_eight_engines_on_four_partitions_are_two_each_where_the_hash_left_one_empty() -> None:
    engines = [f"engine-{n}" for n in range(8)]
    hashed = collections.Counter((murmur2(e.encode()) & 0x7FFFFFFF) % 4 for e in engines)
    assert min(hashed[p] for p in range(4)) == 0  # as measured: one partition carried nothing
    assert _loads(engines, 4) == [2, 2, 2, 2]
    assert _loads(engines, 8) == [1] * 8


def test_two_pools_each_spread_on_their_own() -> None:
    short = _loads([f"short-{n}" for n in range(8)], 8)
    long = _loads([f"long-{n}" for n in range(8)], 8)
    assert short == long == [1] * 8


def test_an_id_without_an_ordinal_is_hashed_as_kafka_does() -> None:
    for key in (b"fleet", b"engine-a", b"", b"\xff\xfe"):
        assert key_partition(key, 8) == (murmur2(key) & 0x7FFFFFFF) % 8


def test_the_rule_is_a_function_of_the_id_alone() -> None:
    assert engine_partition("vllm-12", 8) == engine_partition("vllm-12", 8)
    assert engine_partition("vllm-012", 8) == engine_partition("vllm-12", 8)
    assert engine_partition("vllm-13", 8) == (engine_partition("vllm-12", 8) + 1) % 8


def test_a_topic_without_partitions_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one partition"):
        engine_partition("engine-0", 0)


class _Cluster:
    """The part of kafka-python's ClusterMetadata a partitioner reads: one topic ``t`` of four partitions."""

    def topics(self) -> set[str]:
        return {"t"}

    def partitions_for_topic(self, topic: str) -> set[int]:
        return {0, 1, 2, 3}

    def available_partitions_for_topic(self, topic: str) -> set[int]:
        return {0, 1, 2, 3}


def test_the_producer_partitioner_places_keyed_records_by_the_rule() -> None:
    cluster = _Cluster()
    partitioner = EnginePartitioner()
    chosen = [partitioner.partition("t", None, f"engine-{n}".encode(), None, b"{}", cluster) for n in range(8)]
    assert chosen == [engine_partition(f"engine-{n}", 4) for n in range(8)]
    assert partitioner.partition("t", None, None, None, b"{}", cluster) in range(4)
