"""Which partition of ``gov.telemetry`` carries an engine: the key rule that spreads a fleet evenly.

Every event of an engine travels on one partition, keyed by its id (DESIGN principle 2), and a
partition is the unit a consumer-group member owns, so the spread of engines over partitions bounds
how evenly members share the work. Kafka's default partitioner hashes the key (murmur2), which
spreads a few engines badly: the eight engines ``engine-0`` ... ``engine-7`` land 1, 3, 0, 4 on
four partitions and 0, 1, 0, 3, 1, 2, 0, 1 on eight (docs/operations.md, "Scaling by partitions").

The rule: an id that ends in a decimal ordinal (``engine-3``, ``vllm-12``, a StatefulSet pod's
name) is placed round robin by that ordinal, starting at the partition its prefix hashes to::

    partition = (murmur2(prefix) + ordinal) mod partitions

so ``n`` engines of one prefix numbered ``0 .. n-1`` load ``partitions`` partitions within one
engine of each other, and two pools (``short-0 ..``, ``long-0 ..``) each spread on their own.
An id without a trailing ordinal is hashed whole, as Kafka's default partitioner does. The rule
is a function of the id and the partition count only, so the engine SDK's producer and the stream
processor's log rebuild (services/stream/log_rebuild.py) agree on it without talking.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from kafka.partitioner import DefaultPartitioner, murmur2

_ORDINAL = re.compile(r"^(.*?)(\d+)$", re.DOTALL)
_POSITIVE = 0x7FFFFFFF


def engine_partition(engine_id: str, partitions: int) -> int:
    """The partition of ``engine_id``'s telemetry among ``partitions`` (the module docstring's rule)."""
    return key_partition(engine_id.encode(), partitions)


@functools.lru_cache(maxsize=65_536)
def key_partition(key: bytes, partitions: int) -> int:
    """The partition of a record keyed ``key`` among ``partitions``: by trailing ordinal, else by murmur2.

    Memoised: a fleet has few engine ids, and kafka-python's pure-Python murmur2 and the ordinal's
    regular expression were a tenth of the engine publisher's CPU per event.
    """
    if partitions < 1:
        msg = f"a topic has at least one partition, not {partitions}"
        raise ValueError(msg)
    match = _ORDINAL.match(key.decode("utf-8", errors="replace"))
    if match is None:
        hashed: int = murmur2(key)
        return (hashed & _POSITIVE) % partitions
    prefix, ordinal = match.group(1).encode(), int(match.group(2))
    start: int = murmur2(prefix) & _POSITIVE
    return (start + ordinal) % partitions


class EnginePartitioner(DefaultPartitioner):  # type: ignore[misc]
    """kafka-python's partitioner with the engine rule for keyed records (unkeyed ones as the default)."""

    def partition(  # noqa: PLR0917 -- kafka-python calls it with six positional arguments
        self,
        topic: str,
        key: object,
        serialized_key: bytes | None,
        value: object,
        serialized_value: bytes | None,
        cluster: Any,  # kafka-python's ClusterMetadata, untyped
    ) -> int:
        """Place a keyed record by ``key_partition`` among the topic's partitions; defer the others."""
        if serialized_key is None:
            chosen: int = super().partition(topic, key, serialized_key, value, serialized_value, cluster)
            return chosen
        all_partitions = sorted(cluster.partitions_for_topic(topic))
        return int(all_partitions[key_partition(serialized_key, len(all_partitions))])
