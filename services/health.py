"""Health and Prometheus metrics over HTTP for the long-running services.

``/healthz`` answers 200 with a JSON body while the service's loop has made progress recently, 503
otherwise; ``/metrics`` serves the service's own Prometheus registry. The server runs in a daemon
thread; the owner starts it and shuts it down.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST


class ServiceMetrics:
    """The metrics every Governor service exports, in a registry of its own."""

    def __init__(self, service: str) -> None:
        self.registry = CollectorRegistry()
        self.events_folded = Counter("governor_events_folded", "telemetry events folded", registry=self.registry)
        self.events_dead_lettered = Counter(
            "governor_events_dead_lettered", "invalid events dead-lettered", registry=self.registry
        )
        self.snapshots = Counter("governor_snapshots", "estimate snapshots taken", registry=self.registry)
        self.foreign_events = Counter(
            "governor_foreign_events", "events of another deployment, skipped", registry=self.registry
        )
        self.decisions = Counter("governor_decisions", "policy decisions stored", ["kind"], registry=self.registry)
        self.lag = Gauge("governor_consumer_lag", "records behind the end of the log", registry=self.registry)
        self.loop_latency = Histogram(
            "governor_loop_latency_seconds",
            "time to process one batch",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
            registry=self.registry,
        )
        self.service = service
        self.last_progress = time.monotonic()

    def progressed(self) -> None:
        """Record that the service's loop completed an iteration."""
        self.last_progress = time.monotonic()


class HealthServer:
    """``/healthz`` and ``/metrics`` on ``host``:``port`` (0 picks a free port)."""

    def __init__(
        self,
        metrics: ServiceMetrics,
        port: int,
        host: str = "127.0.0.1",
        stale_after_s: float = 30.0,
        details: Callable[[], dict[str, object]] | None = None,
    ) -> None:
        self._metrics = metrics
        self._stale_after_s = stale_after_s
        self._details = details or dict
        handler = self._handler()
        self._server = ThreadingHTTPServer((host, port), handler)
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name="governor-health", daemon=True)

    def start(self) -> None:
        """Serve in a background thread."""
        self._thread.start()

    def close(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/metrics":
                    self._send(200, CONTENT_TYPE_LATEST, generate_latest(outer._metrics.registry))
                elif self.path == "/healthz":
                    age = time.monotonic() - outer._metrics.last_progress
                    healthy = age <= outer._stale_after_s
                    body = {
                        "service": outer._metrics.service,
                        "healthy": healthy,
                        "seconds_since_progress": round(age, 3),
                        **outer._details(),
                    }
                    self._send(200 if healthy else 503, "application/json", json.dumps(body).encode())
                else:
                    self._send(404, "text/plain", b"not found\n")

            def _send(self, status: int, content_type: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return

        return Handler
