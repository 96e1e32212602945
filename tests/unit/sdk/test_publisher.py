"""The engine publisher's losses: counted always, logged once per loss period, never raised into the engine."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import cast

from kafka import KafkaProducer
from kafka.errors import KafkaTimeoutError
from structlog.testing import capture_logs

from schemas.events import Event
from services.engines.stream import EngineStream
from services.sdk.envelope import EnvelopeStamper
from services.sdk.publisher import TelemetryPublisher
from services.stack.processes import free_port
from services.testing.streams import synthetic_stream


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


class _Future:
    """A send's future: resolved when its producer says (or never); a callback added later runs at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._outcome: str | None = None
        self._callbacks: list[Callable[[object], None]] = []
        self._errbacks: list[Callable[[BaseException], None]] = []

    def add_callback(self, callback: Callable[[object], None]) -> None:
        with self._lock:
            self._callbacks.append(callback)
            outcome = self._outcome
        if outcome == "delivered":
            callback(None)

    def add_errback(self, errback: Callable[[BaseException], None]) -> None:
        with self._lock:
            self._errbacks.append(errback)
            outcome = self._outcome
        if outcome == "expired":
            errback(KafkaTimeoutError("Expiring 1 record(s)"))

    def resolve(self, outcome: str) -> None:
        with self._lock:
            self._outcome = outcome
            callbacks, errbacks = list(self._callbacks), list(self._errbacks)
        if outcome == "delivered":
            for callback in callbacks:
                callback(None)
        else:
            for errback in errbacks:
                errback(KafkaTimeoutError("Expiring 1 record(s)"))


class _Producer:
    """A producer that answers each send as ``outcome`` says: "delivered", "expired", or None (never)."""

    def __init__(self, outcome: Callable[[int], str | None]) -> None:
        self._outcome = outcome
        self._answers: list[threading.Timer] = []
        self._unanswered = 0
        self.sent = 0

    def send(self, topic: str, *, key: bytes, value: bytes) -> _Future:
        future = _Future()
        outcome = self._outcome(self.sent)
        self.sent += 1
        if outcome is None:
            self._unanswered += 1
        else:
            answer = threading.Timer(0.001, future.resolve, args=(outcome,))
            answer.start()
            self._answers.append(answer)
        return future

    def flush(self, timeout: float | None = None) -> None:
        """Wait for the answers to come, as kafka-python's does; time out if some never will."""
        for answer in self._answers:
            answer.join()
        if self._unanswered:
            time.sleep(timeout or 0.0)
            raise KafkaTimeoutError("Timeout waiting for future")

    def close(self, timeout: float | None = None) -> None:
        """Nothing to release."""


class _ScriptedPublisher(TelemetryPublisher):
    """A publisher whose successive producers are the given ones, in place of Kafka clients."""

    def __init__(self, producers: list[_Producer], send_timeout_s: float) -> None:
        self.producers = producers
        self.connected = 0
        super().__init__("127.0.0.1:1", send_timeout_s=send_timeout_s)

    def _connect(self) -> KafkaProducer | None:
        producer = self.producers[min(self.connected, len(self.producers) - 1)]
        self.connected += 1
        return cast(KafkaProducer, producer)


def _publish_until(publisher: TelemetryPublisher, events: list[Event], done: Callable[[], bool]) -> None:
    """Publish ``events`` one every 10 ms until ``done``, then give the publisher's thread 10 s to get there."""
    for event in events:
        publisher.publish(event)
        time.sleep(0.01)
        if done():
            return
    deadline = time.monotonic() + 10.0
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError("the publisher never got there")
        time.sleep(0.01)


def test_expired_records_followed_by_deliveries_keep_the_producer() -> None:
    """The client recovers from expiries itself: rebuilding would lose what it holds in flight.

    The send timeout is long beside the answers' 1 ms, so that a loaded machine that stalls this
    test's threads for a few hundred milliseconds cannot make the deliveries look late.
    """
    events = synthetic_stream(engines=1, requests=40, seed=4)
    producer = _Producer(lambda sent: "expired" if sent < 5 else "delivered")
    publisher = _ScriptedPublisher([producer], send_timeout_s=3.0)
    _publish_until(publisher, events, lambda: publisher.stats().delivered >= 60)
    publisher.close(timeout_s=5.0)
    stats = publisher.stats()
    assert publisher.connected == 1
    assert stats.dropped == 5
    assert stats.delivered + stats.dropped == stats.published


def test_a_producer_that_delivers_nothing_after_a_failure_is_rebuilt() -> None:
    events = synthetic_stream(engines=1, requests=80, seed=5)
    publisher = _ScriptedPublisher(
        [_Producer(lambda sent: "expired"), _Producer(lambda sent: "delivered")], send_timeout_s=0.2
    )
    _publish_until(publisher, events, lambda: publisher.stats().delivered >= 10)
    publisher.close(timeout_s=5.0)
    stats = publisher.stats()
    assert publisher.connected == 2
    assert stats.delivered + stats.dropped == stats.published


def test_a_wedged_producer_is_rebuilt_and_what_it_held_counts_as_dropped() -> None:
    """kafka-python 3.0 once reset its producer id after a broker stall and then never sent nor expired its batches."""
    events = synthetic_stream(engines=1, requests=200, seed=6)
    wedged = _Producer(lambda sent: "delivered" if sent < 3 else None)
    publisher = _ScriptedPublisher([wedged, _Producer(lambda sent: "delivered")], send_timeout_s=0.2)
    with capture_logs() as logs:
        _publish_until(publisher, events, lambda: publisher.connected == 2 and publisher.stats().delivered > 3)
        publisher.close(timeout_s=5.0)
    stats = publisher.stats()
    assert wedged.sent > 3
    assert stats.dropped >= wedged.sent - 3
    assert stats.delivered + stats.dropped == stats.published
    assert [entry["reason"] for entry in logs if entry["event"] == "telemetry_loss_started"] == ["producer_released"]
