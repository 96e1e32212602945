"""Kafka stand-ins for the stream side's unit tests: a producer keeping its sends, and a consumer.

A consumed record is ``services.testing.memory_source.MemoryRecord``.

The batch handling both runtimes share takes these through small protocols (services/stream/batches.py);
the integration tests run the same code on the real broker.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kafka.errors import KafkaTimeoutError

from schemas.names import TELEMETRY_TOPIC, Partition


@dataclass(frozen=True, slots=True)
class Sent:
    """A send's future, already completed: delivered, or failed with ``exception``."""

    exception: Exception | None = None

    def succeeded(self) -> bool:
        return self.exception is None


@dataclass
class KeptProducer:
    """Keeps every (topic, value) sent; ``flush`` delivers nothing further; ``failing`` fails every send."""

    sent: list[tuple[str, bytes]] = field(default_factory=list)
    failing: bool = False

    def send(self, topic: str, key: bytes | None, value: bytes) -> Sent:
        self.sent.append((topic, value))
        return Sent(KafkaTimeoutError("broker gone") if self.failing else None)

    def flush(self, timeout: float) -> None:
        return None


@dataclass
class Consumer:
    """A consumer holding partition 0 (or ``partitions``) of the telemetry topic; remembers rewinds.

    ``ends`` are the partitions' high watermarks as the last fetch reported them (none: not fetched).
    """

    rewinds: list[dict[Partition, int]] = field(default_factory=list)
    partitions: tuple[int, ...] = (0,)
    ends: dict[int, int] = field(default_factory=dict)

    def assigned(self) -> list[Partition]:
        return [(TELEMETRY_TOPIC, p) for p in self.partitions]

    def highwater(self, partition: Partition) -> int | None:
        return self.ends.get(partition[1])

    def rewind(self, positions: dict[Partition, int]) -> None:
        self.rewinds.append(positions)
