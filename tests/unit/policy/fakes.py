"""Kafka stand-ins for the policy side's unit tests: a consumed record of gov.estimates, a sink keeping its sends."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Record:
    """A consumed record of ``gov.estimates``."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


@dataclass
class ListSink:
    """Keeps every (topic, value) the handler sends."""

    sent: list[tuple[str, bytes]] = field(default_factory=list)

    def send(self, topic: str, key: bytes | None, value: bytes) -> None:
        self.sent.append((topic, value))

    def on(self, topic: str) -> list[bytes]:
        return [value for sent_topic, value in self.sent if sent_topic == topic]
