"""Publish a test's telemetry stream whole, for tests whose assertions need every event folded.

An engine's publisher drops what the broker has not taken within 5 s (the engine's loop never
waits), which on a loaded machine loses events and turns an exact comparison into a flake. A test
stream is published the way ``governor replay`` publishes: waiting for room and for acknowledgements
(``block_when_full``, 60 s), and nothing may be dropped.
"""

from __future__ import annotations

from collections.abc import Iterable

from schemas.events import Event
from services.sdk.publisher import TelemetryPublisher


def publish_all(bootstrap: str, events: Iterable[Event]) -> int:
    """Publish ``events`` to ``gov.telemetry`` and wait until the broker has every one; return how many."""
    publisher = TelemetryPublisher(bootstrap, block_when_full=True)
    count = 0
    try:
        for event in events:
            publisher.publish(event)
            count += 1
        assert publisher.flush(120.0), "the broker did not acknowledge the test stream within 120 s"
    finally:
        publisher.close()
    assert publisher.stats().dropped == 0, publisher.stats()
    return count
