"""A sink keeping what the policy side sends, for its unit tests (records consumed: tests/unit/stream/fakes.py)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ListSink:
    """Keeps every (topic, value) the handler sends."""

    sent: list[tuple[str, bytes]] = field(default_factory=list)

    def send(self, topic: str, key: bytes | None, value: bytes) -> None:
        self.sent.append((topic, value))

    def on(self, topic: str) -> list[bytes]:
        return [value for sent_topic, value in self.sent if sent_topic == topic]
