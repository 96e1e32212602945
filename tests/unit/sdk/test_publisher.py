"""The engine publisher's losses: counted always, logged once per loss period, never raised into the engine."""

from __future__ import annotations

import threading

from structlog.testing import capture_logs

from services.engines.stream import EngineStream
from services.sdk.envelope import EnvelopeStamper
from services.sdk.publisher import TelemetryPublisher
from services.stack.processes import free_port
from tests.unit.stream.synthetic import synthetic_stream


def test_a_broker_that_never_answers_costs_every_event_and_one_warning() -> None:
    events = synthetic_stream(engines=1, requests=20, seed=3)
    with capture_logs() as logs:
        publisher = TelemetryPublisher(f"127.0.0.1:{free_port()}", send_timeout_s=0.2)
        for event in events:
            publisher.publish(event)
        publisher.close(timeout_s=30.0)
    stats = publisher.stats()
    assert stats.published == len(events)
    assert stats.delivered == 0
    assert stats.dropped == len(events)
    started = [entry for entry in logs if entry["event"] == "telemetry_loss_started"]
    assert len(started) == 1
    assert started[0]["reason"] == "broker_unavailable"


def test_an_attached_stream_is_drained_on_the_sending_thread_and_close_waits_for_it() -> None:
    """A deferred engine stream's events are built by the publisher's thread, never by the caller's."""
    publisher = TelemetryPublisher(f"127.0.0.1:{free_port()}", send_timeout_s=0.2)
    stream = EngineStream(stamper=EnvelopeStamper(engine_id="vllm-0", deployment="dep"), sink=publisher, deferred=True)
    publisher.attach(stream)
    built_on: list[str] = []
    for index in range(50):
        stream.heartbeat(float(index), num_running=index, num_waiting=0)
    stream.later(lambda _: built_on.append(threading.current_thread().name))
    publisher.close(timeout_s=30.0)
    assert not stream.pending()
    assert built_on == ["governor-publisher"]
    stats = publisher.stats()
    assert (stats.published, stats.dropped) == (50, 50)
