"""Prometheus series of an engine's ``TelemetryPublisher``: published, delivered and dropped events.

The engine side has no server of Governor's own; an engine process registers a
``PublisherCollector`` on the registry its own ``/metrics`` serves (vLLM's is prometheus_client's
default registry), so telemetry the publisher dropped shows on the same dashboard as the services.
The counters are read from ``TelemetryPublisher.stats`` at scrape time: nothing on the engine's
per-step path changes.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from services.sdk.publisher import TelemetryPublisher

PUBLISHER_SERVICE = "engine"


class PublisherCollector(Collector):
    """The SDK publisher's counters as Prometheus series, labelled like the services' (``service="engine"``)."""

    def __init__(self, publisher: TelemetryPublisher, *, deployment: str, engine: str) -> None:
        self._publisher = publisher
        self._labels = [deployment, PUBLISHER_SERVICE, engine]

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        """Yield the publisher's published, delivered and dropped counters and its queue depth."""
        stats = self._publisher.stats()
        names = ["deployment", "service", "engine"]
        for name, help_text, value in (
            ("governor_publisher_events_published", "telemetry events handed to the publisher", stats.published),
            ("governor_publisher_events_delivered", "telemetry events the broker acknowledged", stats.delivered),
            ("governor_publisher_events_dropped", "telemetry events dropped (queue full, broker away)", stats.dropped),
        ):
            counter = CounterMetricFamily(name, help_text, labels=names)
            counter.add_metric(self._labels, value)
            yield counter
        queued = GaugeMetricFamily("governor_publisher_queue_depth", "events waiting to be sent", labels=names)
        queued.add_metric(self._labels, stats.queued)
        yield queued
