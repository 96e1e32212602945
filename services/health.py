"""Health and Prometheus metrics over HTTP for the long-running services.

``/healthz`` and ``/readyz`` answer 200 with a JSON body while the service makes progress, 503
otherwise. Progress means two things, both required:

- the service's loop turns (``progressed``: every poll, empty or not); a loop stuck for
  ``stale_after_s`` is unhealthy;
- records are folded while there are records to fold: the lag is measured on every poll
  (``lag_measured``), and when the assigned partitions have lag and nothing was folded
  (``folded``) for ``stall_after_s`` (``GOVERNOR_STALL_AFTER_S``), the service is stalled. A loop
  that polls and gets nothing while the log grows (a broker whose fetches stopped returning
  records) is a stall, not health;
- batches succeed: a batch that fails and is retried (``batch_failed``) starts a clock that only a
  fold stops, and after ``stall_after_s`` of failing the service is unhealthy, whatever the lag
  says (the retried batch may hold the whole backlog, so the lag reads 0). Received records are not
  progress: the policy service counts a fold only once a batch is committed.

``/readyz`` answers as ``/healthz`` does and adds whether the service holds partitions; both
bodies give the lag, the seconds since the last fold and the log resets seen (services/log_reset.py).
``/metrics`` serves the service's own Prometheus registry. The server runs in a daemon thread; the
owner starts it and shuts it down.

Every series carries ``deployment`` and ``service`` labels (a Prometheus scraping several
deployments' services tells them apart without relabelling), and the per-policy series add
``kind`` and ``scope``. docs/observability.md lists the series; ops/grafana and ops/prometheus
query them, and tests/unit/test_ops_metrics.py checks every query names one of them.
"""

from __future__ import annotations

import errno
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from schemas.engines import PolicyApplied
from schemas.errors import ConfigError
from schemas.policy_docs.base import PolicyDocument
from services.watched_values import watched_values

SERVICE_LABELS = ("deployment", "service")
FOREIGN_DEPLOYMENTS_LABELLED = 20  # past this many other deployments, their events count under "other"


class ServiceMetrics:
    """The metrics every Governor service exports, in a registry of its own."""

    def __init__(self, service: str, deployment: str) -> None:
        self.registry = CollectorRegistry()
        self.service = service
        self.deployment = deployment
        labels = SERVICE_LABELS
        policy_labels = (*SERVICE_LABELS, "kind", "scope")
        registry = self.registry
        self.events_folded = Counter(
            "governor_events_folded", "telemetry events folded", labels, registry=registry
        ).labels(deployment, service)
        self.events_dead_lettered = Counter(
            "governor_events_dead_lettered", "invalid events dead-lettered", labels, registry=registry
        ).labels(deployment, service)
        self._dead_letter_codes = Counter(
            "governor_dead_letters",
            "records dead-lettered, by code (no_value, not_json, oversized, contract, event_time_ahead, ...)",
            (*labels, "code"),
            registry=registry,
        )
        self.duplicates = Counter(
            "governor_events_duplicate", "events skipped as duplicates of a folded event_id", labels, registry=registry
        ).labels(deployment, service)
        self.seq_gaps = Counter(
            "governor_seq_gaps", "times an engine's seq jumped past the next number", labels, registry=registry
        ).labels(deployment, service)
        self.seq_missing = Counter(
            "governor_seq_missing_events", "seq numbers skipped in those gaps (events lost)", labels, registry=registry
        ).labels(deployment, service)
        self.restarts = Counter(
            "governor_engine_restarts", "engine restarts seen (a new source_epoch)", labels, registry=registry
        ).labels(deployment, service)
        self.snapshots = Counter("governor_snapshots", "estimate snapshots taken", labels, registry=registry).labels(
            deployment, service
        )
        self._foreign_events = Counter(
            "governor_foreign_events",
            "events of another deployment, skipped (a wrong GOVERNOR_DEPLOYMENT on an engine)",
            (*labels, "foreign_deployment"),
            registry=registry,
        )
        self._decisions = Counter("governor_decisions", "policy decisions stored", (*labels, "kind"), registry=registry)
        self._refused = Counter(
            "governor_decisions_refused",
            "policy decisions the compare-and-set refused (a newer version was stored)",
            (*labels, "kind"),
            registry=registry,
        )
        self.lag = Gauge(
            "governor_consumer_lag", "records behind the end of the log", labels, registry=registry
        ).labels(deployment, service)
        self.loop_latency = Histogram(
            "governor_loop_latency_seconds",
            "time to process one batch",
            labels,
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
            registry=registry,
        ).labels(deployment, service)
        self._version = Gauge(
            "governor_policy_version", "version of the current policy document", policy_labels, registry=registry
        )
        self._decided_at = Gauge(
            "governor_policy_decided_timestamp_seconds",
            "wall-clock time the current document was decided, Unix seconds",
            policy_labels,
            registry=registry,
        )
        self._age = Gauge(
            "governor_policy_age_seconds",
            "event time from the document's computed_at to its scope's newest snapshot, seconds",
            policy_labels,
            registry=registry,
        )
        self._valid_for = Gauge(
            "governor_policy_valid_for_seconds",
            "valid_until - computed_at of the current document, seconds",
            policy_labels,
            registry=registry,
        )
        self._value = Gauge(
            "governor_policy_value",
            "a watched value of the current document (EB+ mode, SLAI delta, FleetOpt n_s/n_l, ...)",
            (*policy_labels, "name"),
            registry=registry,
        )
        self._acked_version = Gauge(
            "governor_policy_acked_version",
            "version an engine last acknowledged as applied",
            (*policy_labels, "engine"),
            registry=registry,
        )
        self._engine_seen_at = Gauge(
            "governor_engine_last_event_timestamp_seconds",
            "wall-clock time an engine's last event was folded, Unix seconds",
            (*labels, "engine"),
            registry=registry,
        )
        self._engine_event_time = Gauge(
            "governor_engine_event_time_seconds",
            "event time of an engine's last folded event",
            (*labels, "engine"),
            registry=registry,
        )
        self._log_resets = Counter(
            "governor_log_resets",
            "partitions found on a new log (broker restarted without storage, topic recreated) and rebuilt",
            (*labels, "topic", "partition", "reason"),
            registry=registry,
        )
        self._unreadable_values = Counter(
            "governor_store_values_unreadable",
            "values in Redis of the wrong type or shape, reported and replaced or skipped (never retried as an outage)",
            (*labels, "what"),
            registry=registry,
        )
        self._computed_at: dict[tuple[str, str], float] = {}
        self._foreign_seen: set[str] = set()
        self.last_progress = time.monotonic()
        self.last_folded = self.last_progress
        self.failing_since: float | None = None
        self.current_lag = 0
        self.assigned = 0
        self.log_resets = 0

    def progressed(self) -> None:
        """Record that the service's loop completed an iteration."""
        self.last_progress = time.monotonic()

    def folded(self) -> None:
        """Record that the service folded (or decided from) at least one record just now, and committed or
        will commit it: its batches no longer fail."""
        self.last_folded = time.monotonic()
        self.failing_since = None

    def batch_failed(self) -> None:
        """Record that a batch (or the step that positions the partitions) failed and will be retried.

        The first failure since the last fold starts the clock health reads (``failing_for``): a loop
        that turns, polls and retries the same input is not making progress, however busy it looks.
        """
        if self.failing_since is None:
            self.failing_since = time.monotonic()

    def failing_for(self) -> float:
        """Seconds since the first of the batch failures not followed by a fold; 0.0 when none failed."""
        return 0.0 if self.failing_since is None else time.monotonic() - self.failing_since

    def lag_measured(self, lag: int, assigned: int) -> None:
        """Record the lag over the ``assigned`` partitions, measured at this poll; also a loop turn."""
        self.current_lag = lag
        self.assigned = assigned
        self.lag.set(lag)
        self.progressed()

    def stalled_for(self) -> float:
        """Seconds since the last fold while records wait (lag above zero); 0.0 when nothing waits."""
        if self.current_lag <= 0:
            return 0.0
        return time.monotonic() - self.last_folded

    def log_reset(self, topic: str, partition: int, reason: str) -> None:
        """Count one partition found on a new log."""
        self.log_resets += 1
        self._log_resets.labels(self.deployment, self.service, topic, str(partition), reason).inc()

    def foreign(self, foreign_deployment: str) -> None:
        """Count one event of ``foreign_deployment`` (the first few deployments by name, then ``other``)."""
        if foreign_deployment not in self._foreign_seen and len(self._foreign_seen) < FOREIGN_DEPLOYMENTS_LABELLED:
            self._foreign_seen.add(foreign_deployment)
        label = foreign_deployment if foreign_deployment in self._foreign_seen else "other"
        self._foreign_events.labels(self.deployment, self.service, label).inc()

    def dead_lettered(self, code: str) -> None:
        """Count one dead-lettered record under its code (schemas/records.py ``DeadLetterCode``)."""
        self._dead_letter_codes.labels(self.deployment, self.service, code).inc()

    def stored_value_unreadable(self, what: str) -> None:
        """Count one value in Redis the service could not read (``engine_state``, ``policy_key``, ``service_state``)."""
        self._unreadable_values.labels(self.deployment, self.service, what).inc()

    def decided(self, document: PolicyDocument) -> None:
        """Export a newly stored document: its version, validity, decision time and watched values."""
        labels = (self.deployment, self.service, document.kind, document.scope)
        self._decisions.labels(self.deployment, self.service, document.kind).inc()
        self._version.labels(*labels).set(document.version)
        self._decided_at.labels(*labels).set_to_current_time()
        self._valid_for.labels(*labels).set(document.valid_until - document.computed_at)
        self._age.labels(*labels).set(0.0)
        self._computed_at[(document.kind, document.scope)] = document.computed_at
        for value in watched_values(document):
            self._value.labels(*labels, value.name).set(value.value)

    def refused(self, kind: str) -> None:
        """Count a decision the compare-and-set refused."""
        self._refused.labels(self.deployment, self.service, kind).inc()

    def snapshot_seen(self, scope: str, ts: float) -> None:
        """Age every current document of ``scope`` to the event time ``ts`` of its newest snapshot."""
        for (kind, document_scope), computed_at in self._computed_at.items():
            if document_scope == scope:
                self._age.labels(self.deployment, self.service, kind, scope).set(max(0.0, ts - computed_at))

    def acked(self, ack: PolicyApplied) -> None:
        """Export the version an engine acknowledged as applied (a refusal changes nothing)."""
        if ack.applied:
            self._acked_version.labels(self.deployment, self.service, ack.kind, ack.scope, ack.engine_id).set(
                ack.version
            )

    def engines_seen(self, last_ts: dict[str, float]) -> None:
        """Mark each engine of ``last_ts`` (engine -> event time of its last event) as heard from now."""
        for engine, ts in last_ts.items():
            self._engine_seen_at.labels(self.deployment, self.service, engine).set_to_current_time()
            self._engine_event_time.labels(self.deployment, self.service, engine).set(ts)


class HealthServer:
    """``/healthz`` and ``/metrics`` on ``host``:``port`` (0 picks a free port)."""

    def __init__(
        self,
        metrics: ServiceMetrics,
        port: int,
        host: str = "127.0.0.1",
        *,
        stale_after_s: float = 30.0,
        stall_after_s: float = 30.0,
        details: Callable[[], dict[str, object]] | None = None,
    ) -> None:
        """Bind the server (it serves once started).

        Raises:
            ConfigError: ``host``:``port`` is already in use or cannot be bound.
        """
        self._metrics = metrics
        self._stale_after_s = stale_after_s
        self._stall_after_s = stall_after_s
        self._details = details or dict
        handler = self._handler()
        try:
            self._server = ThreadingHTTPServer((host, port), handler)
        except OSError as exc:
            reason = "is already in use" if exc.errno == errno.EADDRINUSE else f"cannot be bound ({exc.strerror})"
            msg = f"metrics port {host}:{port} {reason}: choose another with --metrics-port or GOVERNOR_METRICS_PORT"
            raise ConfigError(msg) from exc
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name="governor-health", daemon=True)

    def start(self) -> None:
        """Serve in a background thread."""
        self._thread.start()

    def close(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()

    def status(self, *, ready: bool) -> tuple[bool, dict[str, object]]:
        """Whether the service is healthy (or, ``ready``, also holds partitions), and the body that says why."""
        metrics = self._metrics
        age = time.monotonic() - metrics.last_progress
        stalled = metrics.stalled_for()
        problems = []
        if age > self._stale_after_s:
            problems.append(f"loop made no progress for {age:.0f} s")
        if stalled > self._stall_after_s:
            problems.append(f"nothing folded for {stalled:.0f} s while {metrics.current_lag} records wait")
        failing = metrics.failing_for()
        if failing > self._stall_after_s:
            problems.append(f"batches failing and retried for {failing:.0f} s")
        if ready and metrics.assigned == 0:
            problems.append("no partitions assigned")
        body: dict[str, object] = {
            "service": metrics.service,
            "healthy": not problems,
            "problems": problems,
            "seconds_since_progress": round(age, 3),
            "seconds_since_fold": round(time.monotonic() - metrics.last_folded, 3),
            "seconds_failing": round(failing, 3),
            "lag": metrics.current_lag,
            "assigned_partitions": metrics.assigned,
            "log_resets": metrics.log_resets,
            **self._details(),
        }
        return not problems, body

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/metrics":
                    self._send(200, CONTENT_TYPE_LATEST, generate_latest(outer._metrics.registry))
                elif self.path in ("/healthz", "/readyz"):
                    healthy, body = outer.status(ready=self.path == "/readyz")
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
