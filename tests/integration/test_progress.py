"""A short soak on the real broker: at a steady publish rate the stream processor folds everything,
measures its lag on every poll and stays healthy (ops/bench/bench_soak.py is the long version)."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

import pytest

from decide.specs import default_registry
from schemas.events import Event
from services.health import HealthServer, ServiceMetrics
from services.sdk.publisher import TOOL_SEND_TIMEOUT_S, TelemetryPublisher
from services.stack.launcher import StackState
from services.store.redis_store import RedisStore
from services.stream.processor import StreamProcessor
from services.testing.streams import synthetic_stream
from tests.integration.processes import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RATE_EVENTS_PER_S = 400.0


def _health(port: int) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5.0) as response:
            return int(response.status), json.loads(response.read())
    except urllib.error.HTTPError as exc:
        body = json.loads(exc.read())
        exc.close()
        return int(exc.code), body


def _publish_steadily(bootstrap: str, events: list[Event], done: threading.Event, dropped: list[int]) -> None:
    """Publish at ``RATE_EVENTS_PER_S``, never blocking, with a tool's send timeout so a slow broker loses nothing."""
    publisher = TelemetryPublisher(bootstrap, max_queue=len(events) + 1, send_timeout_s=TOOL_SEND_TIMEOUT_S)
    started = time.perf_counter()
    for i, event in enumerate(events):
        wait = started + i / RATE_EVENTS_PER_S - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        publisher.publish(event)
    publisher.flush(2 * TOOL_SEND_TIMEOUT_S)
    dropped.append(publisher.stats().dropped)
    publisher.close()
    done.set()


def test_a_steady_stream_is_folded_whole_with_health_green_and_lag_measured(stack: StackState, deployment: str) -> None:
    events = synthetic_stream(engines=4, requests=1200, deployment=deployment, seed=5)
    store = RedisStore.from_url(stack.redis_url, deployment, 5.0)
    metrics = ServiceMetrics("stream", deployment)
    processor = StreamProcessor(
        deployment=deployment,
        bootstrap=stack.kafka_bootstrap,
        store=store,
        registry=default_registry(),
        metrics=metrics,
    )
    server = HealthServer(metrics, 0, stall_after_s=10.0)
    server.start()
    worker = threading.Thread(target=processor.run, daemon=True)
    worker.start()
    published = threading.Event()
    dropped: list[int] = []
    statuses: list[int] = []
    lags: list[object] = []
    try:
        wait_until(lambda: metrics.assigned > 0, 60.0, "the processor to be assigned its partitions")
        publisher = threading.Thread(target=_publish_steadily, args=(stack.kafka_bootstrap, events, published, dropped))
        publisher.start()
        while not published.is_set():
            status, body = _health(server.port)
            statuses.append(status)
            lags.append(body["lag"])
            time.sleep(0.5)
        publisher.join()
        assert dropped == [0]
        wait_until(
            lambda: processor.counters.folded == len(events),
            120.0,
            f"all {len(events)} published events to be folded",
            state=lambda: processor.counters,
        )
    finally:
        processor.stop()
        worker.join(timeout=30)
        processor.close()
        server.close()
        store.close()
    assert processor.counters.folded == len(events)
    assert processor.counters.skipped == 0
    assert len(statuses) >= 10
    assert set(statuses) == {200}
    assert all(isinstance(lag, int) and lag >= 0 for lag in lags)
    assert metrics.log_resets == 0
