"""The gateway's Prometheus series, in a registry of its own, labelled like every Governor service's.

Every series carries ``deployment`` and ``service`` (``gateway``); docs/gateway.md lists them. The labelled
children a request touches are kept once looked up: ``labels()`` takes a lock and builds a key each call,
which showed in the gateway's profile at two or three calls per request.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from services.health import SERVICE_LABELS


class GatewayMetrics:
    """Counters of requests by outcome, routes, sheds, compressions and upstream errors; queue and rotation gauges."""

    def __init__(self, deployment: str) -> None:
        self.registry = CollectorRegistry()
        self._labels = (deployment, "gateway")
        registry = self.registry
        self._requests = Counter(
            "governor_gateway_requests",
            "requests answered, by outcome",
            (*SERVICE_LABELS, "outcome"),
            registry=registry,
        )
        self._routed = Counter(
            "governor_gateway_routed",
            "requests sent upstream, by pool and routing rule",
            (*SERVICE_LABELS, "pool", "reason"),
            registry=registry,
        )
        self._shed = Counter(
            "governor_gateway_shed", "requests refused, by reason", (*SERVICE_LABELS, "reason"), registry=registry
        )
        self.compressed = Counter(
            "governor_gateway_compressed", "prompts cut for the short pool", SERVICE_LABELS, registry=registry
        ).labels(*self._labels)
        self._upstream_errors = Counter(
            "governor_gateway_upstream_errors",
            "upstream failures, by kind",
            (*SERVICE_LABELS, "kind"),
            registry=registry,
        )
        self._queue_depth = Gauge(
            "governor_gateway_queue_depth", "requests waiting, by pool", (*SERVICE_LABELS, "pool"), registry=registry
        )
        self.upstreams_in_rotation = Gauge(
            "governor_gateway_upstreams_in_rotation", "upstreams taking requests", SERVICE_LABELS, registry=registry
        ).labels(*self._labels)
        self.overhead = Histogram(
            "governor_gateway_overhead_seconds",
            "time from a request's arrival to its upstream call (parse, count, route, queue), seconds",
            SERVICE_LABELS,
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0, 5.0),
            registry=registry,
        ).labels(*self._labels)
        self._answered: dict[str, Counter] = {}
        self._routes: dict[tuple[str, str], Counter] = {}

    def answered(self, outcome: str) -> None:
        """Count one answered request (``ok``, ``bad_request``, ``shed``, ``upstream_error``, ``disconnected``)."""
        child = self._answered.get(outcome)
        if child is None:
            child = self._answered[outcome] = self._requests.labels(*self._labels, outcome)
        child.inc()

    def routed(self, pool: str, reason: str) -> None:
        """Count one routed request."""
        child = self._routes.get((pool, reason))
        if child is None:
            child = self._routes[pool, reason] = self._routed.labels(*self._labels, pool, reason)
        child.inc()

    def shed(self, reason: str) -> None:
        """Count one refused request."""
        self._shed.labels(*self._labels, reason).inc()

    def upstream_error(self, kind: str) -> None:
        """Count one upstream failure."""
        self._upstream_errors.labels(*self._labels, kind).inc()

    def queue_depth(self, pool: str, depth: int) -> None:
        """Set a pool's queue depth."""
        self._queue_depth.labels(*self._labels, pool).set(depth)
