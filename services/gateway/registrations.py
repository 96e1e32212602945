"""Engines that announce an endpoint, and their load: ``engine.registered``, ``engine.heartbeat`` and ``step``.

An engine sends its registration once per start, so the gateway reads every partition of ``gov.telemetry``
from the start of the log (the log is the truth, DESIGN principle 1) and then follows it. It keeps the two
lifecycle event types of its deployment and, of each engine's ``step`` events in one poll, the last (its
load now, reconciled with the gateway's own count in services/gateway/reported_load.py; an engine steps tens
of times a second, and parsing every step would cost the gateway more than the reconciliation is worth). A
byte test rejects every other record before any JSON is parsed, and the rest are validated by the event
contract (``parse_event``); an invalid record is counted and skipped. The reading runs in a daemon thread
(kafka-python is synchronous) and hands each event to the gateway's event loop; with the broker away it
retries every ``retry_s`` and the gateway serves the upstreams it knows. Deviation: reading from the start
costs one pass over the retained log at start-up; a compacted registration topic would avoid it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

import structlog
from kafka.errors import KafkaError

from schemas.engines import EngineRegistered, Heartbeat
from schemas.errors import GovernorError, InvalidInputError
from schemas.events import parse_event
from schemas.names import TELEMETRY_TOPIC
from schemas.steps import StepReport
from services.kafka_clients import reader, require_topic
from services.settings import KafkaSecurity

log = structlog.get_logger(__name__)

FeedEvent = EngineRegistered | Heartbeat | StepReport
_MARKERS = (b'"engine.registered"', b'"engine.heartbeat"')
_STEP_MARKER = b'"event_type":"step"'
POLL_TIMEOUT_MS = 500


def feed_events(records: Iterable[tuple[bytes | None, bytes | None]], deployment: str) -> tuple[list[FeedEvent], int]:
    """The registrations and heartbeats of ``deployment`` among ``(key, value)`` records, then each engine's last
    step among them (records are keyed by engine), and how many of those were invalid."""
    values: list[bytes] = []
    last_steps: dict[bytes | None, bytes] = {}
    for key, value in records:
        if value is None:
            continue
        if _STEP_MARKER in value:
            last_steps[key] = value
        elif any(marker in value for marker in _MARKERS):
            values.append(value)
    events: list[FeedEvent] = []
    invalid = 0
    for value in [*values, *last_steps.values()]:
        try:
            event = parse_event(value)
        except InvalidInputError:
            invalid += 1
            continue
        if isinstance(event, EngineRegistered | Heartbeat | StepReport) and event.deployment == deployment:
            events.append(event)
    return events, invalid


class RegistrationFeed:
    """Follows ``gov.telemetry`` in a thread and delivers the deployment's lifecycle events."""

    def __init__(
        self,
        bootstrap: str,
        *,
        deployment: str,
        deliver: Callable[[FeedEvent], object],
        security: KafkaSecurity,
        timeout_s: float = 5.0,
        retry_s: float = 2.0,
    ) -> None:
        """Args:
        bootstrap: Kafka bootstrap servers.
        deployment: whose engines are read.
        deliver: called from the feed's thread with each event (the gateway hands it to its loop).
        security: Kafka credentials and TLS files.
        timeout_s: timeout of the broker calls.
        retry_s: wait before reconnecting after the broker went away.
        """
        self._bootstrap = bootstrap
        self._deployment = deployment
        self._deliver = deliver
        self._security = security
        self._timeout_s = timeout_s
        self._retry_s = retry_s
        self._stopped = threading.Event()
        self.invalid = 0
        self._thread = threading.Thread(target=self._run, name="governor-gateway-registrations", daemon=True)

    def start(self) -> None:
        """Start following the log."""
        self._thread.start()

    def close(self) -> None:
        """Stop and wait for the thread."""
        self._stopped.set()
        self._thread.join(timeout=self._timeout_s + 2.0)

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                self._follow()
            except (GovernorError, KafkaError, OSError) as exc:
                log.warning("registrations_unavailable", error=str(exc), retry_s=self._retry_s)
                self._stopped.wait(self._retry_s)

    def _follow(self) -> None:
        consumer = reader(self._bootstrap, timeout_s=self._timeout_s, security=self._security)
        try:
            partitions = require_topic(consumer, TELEMETRY_TOPIC, self._bootstrap)
            consumer.assign(partitions)
            consumer.seek_to_beginning(*partitions)
            log.info("registrations_following", partitions=len(partitions))
            while not self._stopped.is_set():
                batches = consumer.poll(timeout_ms=POLL_TIMEOUT_MS)
                records = ((record.key, record.value) for records in batches.values() for record in records)
                events, invalid = feed_events(records, self._deployment)
                self.invalid += invalid
                for event in events:
                    self._deliver(event)
        finally:
            consumer.close()
