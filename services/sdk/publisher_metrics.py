"""Prometheus series of an engine's ``TelemetryPublisher``: published, delivered and dropped events.

The engine side has no server of Governor's own; an engine process registers a
``PublisherCollector`` on the registry its own ``/metrics`` serves (vLLM's is prometheus_client's
default registry), so telemetry the publisher dropped shows on the same dashboard as the services.
The counters are read from ``TelemetryPublisher.stats`` at scrape time: nothing on the engine's
per-step path changes.

A collector only shows in the process that serves ``/metrics``. vLLM runs its scheduler in a
separate engine-core process, so a Governor scheduler's publisher lives where no scrape reaches.
prometheus_client's multiprocess mode (``PROMETHEUS_MULTIPROC_DIR`` set before the server starts)
is how such a process exports: each process writes its metrics' values to files in the directory,
and the serving process reads them all (vLLM's ``/metrics`` then serves
``MultiProcessCollector``, whichever process wrote). Custom collectors are not read in that mode, so
there ``PublisherCounters`` carries the same series as ordinary counters and a gauge, copied from
the publisher's stats by ``refresh`` (the engine link's heartbeat, off the step path).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import Counter, Gauge, values
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from services.sdk.publisher import TelemetryPublisher

PUBLISHER_SERVICE = "engine"
_LABELS = ("deployment", "service", "engine")
_COUNTERS = (
    ("governor_publisher_events_published", "telemetry events handed to the publisher"),
    ("governor_publisher_events_delivered", "telemetry events the broker acknowledged"),
    ("governor_publisher_events_dropped", "telemetry events dropped (queue full, broker away)"),
)
_QUEUE_DEPTH = ("governor_publisher_queue_depth", "events waiting to be sent")


def multiprocess_mode() -> bool:
    """Whether prometheus_client keeps metric values in ``PROMETHEUS_MULTIPROC_DIR`` files.

    prometheus_client decides it once, when it is imported, from the environment the process
    started with; a ``/metrics`` server then has to read the directory, and a ``Collector`` such as
    ``PublisherCollector`` is seen by no scrape.
    """
    return values.ValueClass is not values.MutexValue


class PublisherCollector(Collector):
    """The SDK publisher's counters as Prometheus series, labelled like the services' (``service="engine"``)."""

    def __init__(self, publisher: TelemetryPublisher, *, deployment: str, engine: str) -> None:
        self._publisher = publisher
        self._labels = [deployment, PUBLISHER_SERVICE, engine]

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        """Yield the publisher's published, delivered and dropped counters and its queue depth."""
        stats = self._publisher.stats()
        names = list(_LABELS)
        for (name, help_text), value in zip(_COUNTERS, (stats.published, stats.delivered, stats.dropped), strict=True):
            counter = CounterMetricFamily(name, help_text, labels=names)
            counter.add_metric(self._labels, value)
            yield counter
        queued = GaugeMetricFamily(*_QUEUE_DEPTH, labels=names)
        queued.add_metric(self._labels, stats.queued)
        yield queued


class PublisherCounters:
    """``PublisherCollector``'s series as prometheus_client metrics, for multiprocess mode.

    The metrics are registered on no registry: in multiprocess mode their values go to the
    directory's files whatever registry holds them, and the serving process's
    ``MultiProcessCollector`` reads them from there. Counters advance by what the publisher's stats
    grew since the last ``refresh``; the queue depth is a gauge summed over live processes.
    """

    def __init__(self, publisher: TelemetryPublisher, *, deployment: str, engine: str) -> None:
        self._publisher = publisher
        label_values = (deployment, PUBLISHER_SERVICE, engine)
        self._counters = tuple(
            Counter(name, help_text, _LABELS, registry=None).labels(*label_values) for name, help_text in _COUNTERS
        )
        self._queued = Gauge(*_QUEUE_DEPTH, _LABELS, registry=None, multiprocess_mode="livesum").labels(*label_values)
        self._seen = [0, 0, 0]

    def refresh(self) -> None:
        """Copy the publisher's stats into the series (counters by their growth: they never go back)."""
        stats = self._publisher.stats()
        for i, value in enumerate((stats.published, stats.delivered, stats.dropped)):
            if value > self._seen[i]:
                self._counters[i].inc(value - self._seen[i])
                self._seen[i] = value
        self._queued.set(stats.queued)
