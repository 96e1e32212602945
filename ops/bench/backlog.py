"""A fleet's telemetry as a backlog on the broker: what the ingest benchmarks fold.

Imported by bench_runtime.py, bench_scaling.py and bench_broker_drift.py (run with ``PYTHONPATH=.``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from schemas.events import Event
from services.sdk.protocol import ListSink, StaticPolicySource
from services.sdk.publisher import TelemetryPublisher
from services.sim import load_scenario, run_offline


@dataclass(frozen=True, slots=True)
class ConsumedRecordView:
    """A consumed record as the services take it (``services.kafka_clients.ConsumedRecord``), built in memory."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def fleet_events(deployment: str, seconds: float) -> list[Event]:
    """The telemetry of the ``fleet-8`` scenario over ``seconds`` simulated seconds, for ``deployment``."""
    scenario = replace(load_scenario("fleet-8", duration_s=seconds), deployment=deployment)
    sink = ListSink()
    run_offline(scenario, sink=sink, policy_source=StaticPolicySource())
    return sink.events


def first_fleet_events(deployment: str, count: int) -> list[Event]:
    """The first ``count`` events of the ``fleet-8`` telemetry for ``deployment`` (a run long enough to hold them)."""
    seconds = 30.0
    while len(events := fleet_events(deployment, seconds)) < count:
        seconds *= 2.0
    return events[:count]


def publish_backlog(bootstrap: str, events: list[Event]) -> None:
    """Publish every event and wait until the broker has them all.

    Raises:
        RuntimeError: the backlog was not delivered within 600 s.
    """
    publisher = TelemetryPublisher(bootstrap, max_queue=len(events) + 1)
    for event in events:
        publisher.publish(event)
    delivered = publisher.flush(600.0)
    publisher.close()
    if not delivered:
        msg = f"the backlog of {len(events)} events was not delivered within 600 s"
        raise RuntimeError(msg)
