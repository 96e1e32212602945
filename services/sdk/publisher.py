"""``TelemetryPublisher``: the engine's non-blocking Kafka producer (DESIGN principle 5).

``publish`` puts the event on a bounded queue and returns at once; a background thread hands it
to a Kafka producer that batches by ``linger_ms`` and sends to ``gov.telemetry`` keyed by engine,
on the partition the engine rule gives the id (services/engine_partitions.py: an id ending in an
ordinal is placed round robin, so a numbered fleet loads every partition evenly).
When the queue is full or the broker is away, events are dropped and counted, with one warning when
the loss starts and one line when delivery resumes (how many were lost, for how long): the engine's
loop is never blocked and never sees an exception.

A producer whose delivery failed is replaced by a new one, with backoff (``REBUILD_BACKOFF_S``). An
idempotent producer that met a restarted broker (unknown producer id, or an ``InitProducerId`` the
broker refuses) fails every later send for good; rebuilding it is the only way its engine's telemetry
comes back. Most failed deliveries are not that: a record that expired (the broker took longer than
the send timeout), or a sequence the broker refused after expiries, is recovered by the client itself
(it bumps its producer epoch), and the records after it are delivered once the broker answers again.
A rebuild then loses every record in flight and every event of the backoff: across a 6 s stall of
Apache Kafka at 1,500 events/s, rebuilding at the first failure dropped 3,988 events on top of the
1,805 that had expired. So a failure only starts a clock, and the producer is rebuilt when nothing
was delivered for a send timeout after it. A producer can also wedge with no failure at all: after
such a stall kafka-python 3.0 sometimes reset its producer id and then neither sent nor expired its
472 waiting batches again, so its records stay unresolved; a producer that resolves none of its
records for twice the send timeout (every record resolves within one when the client works) is
rebuilt too, and the records it held count as dropped.

An engine whose event stream is deferred (services/engines/stream.py) attaches it as a source
(``attach``): the sending thread drains it every ``SOURCE_POLL_S``, so the events are built, queued
and encoded here, off the engine's step loop, which only appended their raw numbers.

The producer is idempotent (kafka-python's ``enable_idempotence``, with the ``acks="all"`` it
requires): a batch it retries after a lost acknowledgement is written once by the broker. That holds
within one producer session only; a record produced twice otherwise (a new session, a replay, a
second producer) repeats its ``event_id``, and the stream processor skips it as a duplicate
(fold/event_guard.py).
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import structlog
from kafka import KafkaProducer
from kafka.errors import KafkaError

from schemas.events import Event, encode_event
from schemas.names import TELEMETRY_TOPIC
from services.engine_partitions import EnginePartitioner
from services.kafka_clients import RECONNECT_BACKOFF_MAX_MS, close_producer
from services.kafka_security import PLAINTEXT, kafka_producer
from services.settings import KafkaSecurity

log = structlog.get_logger(__name__)

REBUILD_BACKOFF_S = (0.5, 5.0)  # wait before the first new producer after a failure, and the longest wait
ENGINE_SEND_TIMEOUT_S = 5.0  # an engine drops telemetry the broker has not taken by then, and goes on
TOOL_SEND_TIMEOUT_S = 60.0  # a tool that must lose nothing waits out a slow broker
# How often the sending thread drains its sources. Every wake of that thread costs the engine CPU (and
# a GIL hand-over): with a 5 ms drain, most wake-ups found nothing, and the thread spent 0.83-0.98 ms
# of CPU per step of the tiny model's CPU engine; with 50 ms, 0.43-0.45 ms (three rounds each,
# ops/bench/bench_vllm_adapter.py, docs/engines/vllm.md). An event then reaches the producer up to
# 50 ms after its step: its event time is the step's, and the policies decide over windows of
# seconds, so only the wall-clock freshness of the engine's estimates moves.
SOURCE_POLL_S = 0.05
IDLE_POLL_S = 0.5  # without sources: how soon the thread notices one attached


class EventSource(Protocol):
    """Records of events not built yet, drained by the publisher's thread (``EngineStream`` when deferred)."""

    def drain(self) -> int:
        """Build the pending events and ``publish`` them; never raises."""
        ...

    def pending(self) -> bool:
        """True while records wait for a drain or a drain is under way."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class PublisherStats:
    """Counters of a publisher: handed over, delivered (acknowledged by the broker), dropped, still queued."""

    published: int
    delivered: int
    dropped: int
    queued: int


class TelemetryPublisher:
    """Send engine telemetry to Kafka without ever blocking or raising into the caller."""

    def __init__(
        self,
        bootstrap: str,
        *,
        topic: str = TELEMETRY_TOPIC,
        max_queue: int = 100_000,
        send_timeout_s: float | None = None,
        linger_ms: int = 5,
        block_when_full: bool = False,
        security: KafkaSecurity = PLAINTEXT,
    ) -> None:
        """Start the sending thread.

        Args:
            bootstrap: Kafka bootstrap servers.
            topic: where events go (keyed by engine).
            max_queue: events held for the sending thread; past it an engine's events are dropped.
            send_timeout_s: how long a send may wait for the broker's acknowledgement before its
                events count as dropped: ``ENGINE_SEND_TIMEOUT_S`` by default, ``TOOL_SEND_TIMEOUT_S``
                when ``block_when_full``.
            linger_ms: how long the producer batches before sending.
            block_when_full: wait for room instead of dropping when the queue is full. For tools that
                must lose nothing (``governor replay``), never for an engine's step loop. Such a tool
                also waits longer for acknowledgements: a replay that outruns a loaded broker, or
                shares its process with busy threads, builds batches faster than they are sent, and
                batches older than an engine's timeout would expire and be lost.
            security: SASL credentials and TLS files (``SecuritySettings.kafka_security``).
        """
        self._bootstrap = bootstrap
        self._security = security
        self._block_when_full = block_when_full
        self._topic = topic
        self._queue: queue.Queue[Event | None] = queue.Queue(maxsize=max_queue)
        if send_timeout_s is None:
            send_timeout_s = TOOL_SEND_TIMEOUT_S if block_when_full else ENGINE_SEND_TIMEOUT_S
        self._send_timeout_s = send_timeout_s
        self._linger_ms = linger_ms
        self._published = 0
        self._delivered_count = 0
        self._dropped = 0
        self._loss_started_s: float | None = None
        self._loss_dropped = 0
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._producer: KafkaProducer | None = None
        # Of the current producer (``_generation``); an earlier one's late callbacks are ignored,
        # its unresolved records having been counted as dropped when it was released.
        self._generation = 0
        self._unresolved = 0  # records sent, not yet delivered or failed
        self._resolved_at_s = 0.0  # its last callback, or its first send since all were resolved
        self._failing_since_s: float | None = None  # its first failure since its last delivery
        self._backoff_s = REBUILD_BACKOFF_S[0]
        # The current producer's callbacks, built once per producer (here and in ``_abandon``), not per event.
        self._delivered = self._delivered_in(self._generation)
        self._failed = self._failed_in(self._generation)
        self._sources: tuple[EventSource, ...] = ()
        self._thread = threading.Thread(target=self._run, name="governor-publisher", daemon=True)
        self._thread.start()

    def publish(self, event: Event) -> None:
        """Queue ``event`` for sending; when the queue is full, drop and count it (or wait, if blocking)."""
        with self._lock:
            self._published += 1
        try:
            self._queue.put(event, block=self._block_when_full)
        except queue.Full:
            self._drop(1, reason="queue_full")

    def attach(self, source: EventSource) -> None:
        """Drain ``source`` on the sending thread from now on (every ``SOURCE_POLL_S``), and on ``flush``."""
        self._sources = (*self._sources, source)

    def stats(self) -> PublisherStats:
        """Return the counters."""
        with self._lock:
            return PublisherStats(
                published=self._published,
                delivered=self._delivered_count,
                dropped=self._dropped,
                queued=self._queue.qsize(),
            )

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until everything queued or recorded in a source so far was handed to Kafka and acknowledged or dropped.

        Returns:
            False if ``timeout_s`` passed first.
        """
        deadline = time.monotonic() + timeout_s
        while self._busy() and time.monotonic() < deadline:
            time.sleep(0.005)
        if self._busy():
            return False
        producer = self._producer
        if producer is not None:
            try:
                producer.flush(timeout=max(0.0, deadline - time.monotonic()))
            except KafkaError:
                return False
        return True

    def close(self, timeout_s: float = 10.0) -> None:
        """Send what is queued (up to ``timeout_s``) and stop the background thread."""
        self.flush(timeout_s)
        self._stopped.set()
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(None)
        self._thread.join(timeout=timeout_s)

    def _busy(self) -> bool:
        """Records still in a source, or events still queued; sources first, as a drain queues its events."""
        return any(source.pending() for source in self._sources) or self._queue.unfinished_tasks > 0

    def _drain_sources(self) -> None:
        for source in self._sources:
            try:
                source.drain()
            except Exception:
                # The publisher's thread is the engine's lifeline to the log: it never dies.
                log.exception("publisher_source_failed")

    def _drop(self, count: int, *, reason: str, error: BaseException | None = None) -> None:
        """Count ``count`` lost events; the first loss after a delivery opens a loss period, logged once."""
        with self._lock:
            self._dropped += count
            self._loss_dropped += count
            opened = self._loss_started_s is None
            if opened:
                self._loss_started_s = time.monotonic()
        if opened:
            log.warning("telemetry_loss_started", reason=reason, error=repr(error) if error else None)

    def _delivered_in(self, generation: int) -> Callable[[object], None]:
        """The callback of the producer of ``generation``: count the delivery, close a loss period."""

        def delivered(metadata: object) -> None:
            with self._lock:
                if not self._resolve(generation, failed=False):
                    return
                self._delivered_count += 1
                started = self._loss_started_s
                lost = self._loss_dropped
                if started is None:
                    return
                self._loss_started_s = None
                self._loss_dropped = 0
                self._backoff_s = REBUILD_BACKOFF_S[0]
            log.info("telemetry_resumed", dropped=lost, lasted_s=round(time.monotonic() - started, 3))

        return delivered

    def _failed_in(self, generation: int) -> Callable[[BaseException], None]:
        """The errback of the producer of ``generation``: count the loss and start the rebuild clock."""

        def failed(exc: BaseException) -> None:
            with self._lock:
                counted = self._resolve(generation, failed=True)
            if counted:
                self._drop(1, reason="delivery_failed", error=exc)

        return failed

    def _resolve(self, generation: int, *, failed: bool) -> bool:
        """Record a callback of the producer of ``generation`` (holding the lock); False for a released one's."""
        if generation != self._generation:
            return False
        now = time.monotonic()
        self._unresolved -= 1
        self._resolved_at_s = now
        if failed:
            self._start_failing_clock(now)
        else:
            self._failing_since_s = None
        return True

    def _start_failing_clock(self, now: float) -> None:
        """Note the first failure since the last delivery (holding the lock); ``_failed_producer`` reads it."""
        if self._failing_since_s is None:
            self._failing_since_s = now

    def _connect(self) -> KafkaProducer | None:
        # Records the broker cannot take expire after the delivery timeout (their futures fail and
        # are counted as dropped), so a flush or close waiting longer than that always completes. A
        # broker that does not answer holds the thread for the send timeout, not the client's 30 s.
        # Retries are bounded by that timeout alone (kafka-python's default count is unbounded): a
        # count of 2 gave up on a leader election within 300 ms, and 74 of 902 events were dropped
        # while Apache Kafka moved the leaders of a recreated topic.
        timeout_ms = int(self._send_timeout_s * 1000)
        try:
            return kafka_producer(
                self._bootstrap,
                self._security,
                linger_ms=self._linger_ms,
                acks="all",
                enable_idempotence=True,
                partitioner=EnginePartitioner(),
                request_timeout_ms=timeout_ms,
                max_block_ms=timeout_ms,
                bootstrap_timeout_ms=timeout_ms,
                delivery_timeout_ms=timeout_ms + self._linger_ms,
                reconnect_backoff_max_ms=RECONNECT_BACKOFF_MAX_MS,
            )
        except KafkaError as exc:
            log.warning("broker_connection_lost", error=str(exc))
            return None

    def _release(self, producer: KafkaProducer, timeout_s: float) -> None:
        """Close ``producer``, waiting up to ``timeout_s`` for its pending records to resolve; it aborts the rest."""
        try:
            close_producer(producer, timeout_s)
        except KafkaError as exc:
            log.warning("producer_close_failed", error=str(exc))

    def _send(self, producer: KafkaProducer, event: Event) -> None:
        future = producer.send(self._topic, key=event.engine_id.encode(), value=encode_event(event))
        with self._lock:
            if self._unresolved == 0:
                self._resolved_at_s = time.monotonic()
            self._unresolved += 1
        future.add_callback(self._delivered)
        future.add_errback(self._failed)

    def _send_failed(self) -> None:
        """A send the producer refused outright: start the rebuild clock as a failed delivery does."""
        with self._lock:
            self._start_failing_clock(time.monotonic())

    def _abandon(self, producer: KafkaProducer, timeout_s: float) -> None:
        """Release ``producer`` (up to ``timeout_s``); what it still holds then counts as dropped."""
        self._release(producer, timeout_s)
        with self._lock:
            lost = self._unresolved
            self._generation += 1
            self._unresolved = 0
            self._failing_since_s = None
            self._delivered = self._delivered_in(self._generation)
            self._failed = self._failed_in(self._generation)
        if lost:
            self._drop(lost, reason="producer_released")

    def _next_backoff_s(self) -> float:
        """The wait before the next new producer: doubling from the first while failures go on."""
        with self._lock:
            wait = self._backoff_s
            self._backoff_s = min(2 * wait, REBUILD_BACKOFF_S[1])
        return wait

    def _failed_producer(self) -> bool:
        """Whether the producer delivered nothing for a send timeout since a failure, or resolved nothing for two."""
        with self._lock:
            now = time.monotonic()
            failing = self._failing_since_s
            if failing is not None and now - failing > self._send_timeout_s:
                return True
            return self._unresolved > 0 and now - self._resolved_at_s > 2 * self._send_timeout_s

    def _run(self) -> None:
        retry_at = 0.0
        while True:
            self._drain_sources()
            try:
                event = self._queue.get(timeout=SOURCE_POLL_S if self._sources else IDLE_POLL_S)
            except queue.Empty:
                continue
            if event is None:
                self._queue.task_done()
                break
            try:
                if self._producer is not None and self._failed_producer():
                    # Its pending records are failing too: give them a moment, then drop the rest.
                    self._abandon(self._producer, timeout_s=min(1.0, self._send_timeout_s))
                    self._producer = None
                    retry_at = time.monotonic() + self._next_backoff_s()
                    log.info("producer_rebuilding", after_s=round(retry_at - time.monotonic(), 3))
                if self._producer is None and time.monotonic() >= retry_at:
                    self._producer = self._connect()
                    if self._producer is None:
                        retry_at = time.monotonic() + self._next_backoff_s()
                if self._producer is None:
                    self._drop(1, reason="broker_unavailable")
                    continue
                self._send(self._producer, event)
            except KafkaError as exc:
                self._send_failed()
                self._drop(1, reason="broker_unavailable", error=exc)
            except Exception as exc:
                # The publisher's thread is the engine's lifeline to the log: it never dies.
                log.exception("publisher_failed")
                self._drop(1, reason="publisher_error", error=exc)
            finally:
                self._queue.task_done()
        if self._producer is not None:
            # Waits out the delivery timeout, so every pending record resolves (delivered or counted).
            self._abandon(self._producer, timeout_s=2 * self._send_timeout_s + 1.0)
