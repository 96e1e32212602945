"""Backend outages mid-stream, on the real broker and Redis: both services ride them out and lose nothing.

The stream processor and the policy service run as ``governor run`` children. In one test their
own redis-server is paused (SIGSTOP) for 10 s while events keep arriving, then resumed (SIGCONT);
in the other the broker is paused the same way between two halves of the stream. Neither service
exits; each logs an outage it noticed once when it starts and once when it ends, with no
traceback; and nothing is lost: the snapshots on the log are those of the pure fold, the
summaries in Redis equal it, and the decisions on the log are those one uninterrupted pass of the
policy service makes over the same snapshots, with Redis holding the last of each. Two more tests
pause Redis and the broker under the stream processor's faust runtime.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import pytest
import redis
import structlog.testing

from decide.specs import default_registry
from schemas.errors import BackendUnavailableError
from services.policy.service import PolicyService
from services.stack.launcher import StackState
from services.store.redis_store import RedisStore
from services.stream.faust_runtime import FaustStreamProcessor
from services.stream.processor import StreamProcessor
from services.testing.streams import synthetic_stream
from tests.integration.decision_streams import (
    folded_snapshots,
    folded_summaries,
    logged_decisions,
    logged_snapshots,
    reference_decisions,
    stored_documents,
)
from tests.integration.processes import applied_total, start_service, start_stream, summaries, wait_until
from tests.integration.publishing import publish_all

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PAUSE_S = 10.0


def _publish(stack: StackState, events: list) -> None:
    publish_all(stack.kafka_bootstrap, events)


def _log_events(path: Path) -> list[str]:
    names = []
    for line in path.read_text().splitlines():
        if line.startswith("{"):
            names.append(json.loads(line).get("event", ""))
    return names


def _governor_tracebacks(path: Path) -> list[str]:
    """Lines of a service's log that carry a traceback, except those kafka-python's loggers write.

    kafka-python's network thread logs its own errors with their tracebacks while a backend is away or
    a client closes under it (a socket already closed when it re-registers); those are the client's.
    Any other line with a traceback, or a line that is not JSON at all and holds one, is Governor's.
    """
    found = []
    for line in path.read_text().splitlines():
        if "Traceback" not in line:
            continue
        record = json.loads(line) if line.startswith("{") else {}
        if not str(record.get("logger", "")).startswith("kafka"):
            found.append(line)
    return found


def test_redis_paused_mid_stream_stops_no_service_loses_nothing_and_is_logged_once_each_way(
    stack: StackState, deployment: str, tmp_path: Path, own_redis: tuple[str, subprocess.Popen[bytes]]
) -> None:
    redis_url, redis_server = own_redis
    events = synthetic_stream(engines=4, requests=6000, deployment=deployment, seed=7)
    third = len(events) // 3
    _publish(stack, events[:third])
    logs = {name: tmp_path / f"{name}.log" for name in ("stream", "policy")}
    services = {
        name: start_service(stack, name, deployment, logs[name], idle_exit_s=8.0, redis_url=redis_url)
        for name in ("stream", "policy")
    }
    store = RedisStore.from_url(redis_url, deployment, 5.0)
    wait_until(
        lambda: applied_total(store) > 0 and bool(store.applied_offsets("policy")),
        120.0,
        "both services to commit before the outage",
    )
    store.close()
    redis_server.send_signal(signal.SIGSTOP)
    _publish(stack, events[third : 2 * third])
    time.sleep(PAUSE_S)
    redis_server.send_signal(signal.SIGCONT)
    _publish(stack, events[2 * third :])
    assert services["stream"].wait(timeout=300) == 0
    assert services["policy"].wait(timeout=300) == 0

    for name, path in logs.items():
        names = _log_events(path)
        assert (name, names.count("backend_unavailable"), names.count("backend_recovered")) == (name, 1, 1)
        assert _governor_tracebacks(path) == []

    _assert_nothing_lost(stack, deployment, events, redis_url)


def test_redis_paused_under_the_faust_runtime_stops_nothing_loses_nothing_and_is_logged_once_each_way(
    stack: StackState, deployment: str, tmp_path: Path, own_redis: tuple[str, subprocess.Popen[bytes]]
) -> None:
    """The faust worker cannot seek back mid-stream, so it retries in place: it folds again what it kept
    since its last commit. Two engines are folded and committed before the outage; the other two first
    speak during it, so loading their state fails and the batch is retried, and a commit whose reply is
    lost may land. After the outage the estimates and snapshots are those of the pure fold, and the
    outage reads as two lines."""
    redis_url, redis_server = own_redis
    events = synthetic_stream(engines=4, requests=3000, deployment=deployment, seed=10)
    early_engines = {"eng-0", "eng-1"}
    half = len(events) // 2
    early = [event for event in events[:half] if event.engine_id in early_engines]
    rest = [event for event in events[:half] if event.engine_id not in early_engines] + events[half:]
    _publish(stack, early)
    log_path = tmp_path / "stream.log"
    worker = start_stream(stack, deployment, log_path, idle_exit_s=8.0, runtime="faust", redis_url=redis_url)
    store = RedisStore.from_url(redis_url, deployment, 5.0)
    folded_early = folded_summaries(early, deployment)
    wait_until(
        lambda: summaries(store, deployment, sorted(early_engines)) == folded_early,
        90.0,
        "the faust worker to commit the early engines' events before the outage",
    )
    store.close()
    redis_server.send_signal(signal.SIGSTOP)
    _publish(stack, rest[: len(rest) // 2])
    time.sleep(PAUSE_S)
    redis_server.send_signal(signal.SIGCONT)
    _publish(stack, rest[len(rest) // 2 :])
    assert worker.wait(timeout=180) == 0, log_path.read_text(errors="replace")[-2000:]

    names = _log_events(log_path)
    assert (names.count("backend_unavailable"), names.count("backend_recovered")) == (1, 1)
    assert names.count("batch_discarded") >= 1
    assert _governor_tracebacks(log_path) == []
    produced = early + rest
    assert set(logged_snapshots(stack.kafka_bootstrap, deployment)) == folded_snapshots(produced, deployment)
    store = RedisStore.from_url(redis_url, deployment, 5.0)
    engines = sorted({event.engine_id for event in events})
    assert summaries(store, deployment, engines) == folded_summaries(produced, deployment)
    store.close()


@pytest.mark.parametrize("idle_exit_s", [4.0, 0.001], ids=["idle-exit-4s", "idle-exit-shorter-than-a-fetch"])
def test_a_faust_worker_assigned_while_redis_is_paused_waits_then_folds_everything_once(
    stack: StackState, deployment: str, own_redis: tuple[str, subprocess.Popen[bytes]], idle_exit_s: float
) -> None:
    """Its partitions are paused at assignment (the applied offsets cannot be read) and resumed from
    them once Redis answers; the outage reads as two lines.

    An idle exit shorter than the first fetch after the resume ends the worker only once it has read
    every partition to the end the broker reports: at load average 4-12 on Apache Kafka the worker
    once ended here, its first fetch not yet back, having folded nothing."""
    redis_url, redis_server = own_redis
    events = synthetic_stream(engines=2, requests=600, deployment=deployment, seed=13)
    _publish(stack, events)
    store = RedisStore.from_url(redis_url, deployment, 2.0)
    worker = FaustStreamProcessor(
        deployment=deployment, bootstrap=stack.kafka_bootstrap, store=store, registry=default_registry()
    )
    redis_server.send_signal(signal.SIGSTOP)
    resume = threading.Timer(PAUSE_S, redis_server.send_signal, args=(signal.SIGCONT,))
    resume.start()
    try:
        with structlog.testing.capture_logs() as logs:
            counters = worker.run(idle_exit_s=idle_exit_s)
    finally:
        resume.join()
        worker.close()
    names = [entry["event"] for entry in logs]
    assert (names.count("backend_unavailable"), names.count("backend_recovered")) == (1, 1)
    assert next(e["error"] for e in logs if e["event"] == "backend_unavailable").startswith("redis HGETALL")
    assert counters.folded == len(events)
    engines = sorted({event.engine_id for event in events})
    assert summaries(store, deployment, engines) == folded_summaries(events, deployment)
    store.close()


def _assert_nothing_lost(stack: StackState, deployment: str, events: list, redis_url: str) -> None:
    logged = logged_snapshots(stack.kafka_bootstrap, deployment)
    assert set(logged) == folded_snapshots(events, deployment)
    store = RedisStore.from_url(redis_url, deployment, 5.0)
    engines = sorted({event.engine_id for event in events})
    assert summaries(store, deployment, engines) == folded_summaries(events, deployment)
    store.close()
    decisions = logged_decisions(stack.kafka_bootstrap, deployment)
    assert decisions
    assert decisions == reference_decisions(stack.kafka_bootstrap, deployment)
    client = redis.Redis.from_url(redis_url)
    last_logged = {(kind, scope): json.loads(document) for kind, scope, _, document in decisions}
    assert stored_documents(client, deployment) == last_logged
    client.close()


def test_the_broker_paused_mid_stream_stops_no_service_and_loses_nothing(
    stack: StackState, deployment: str, tmp_path: Path
) -> None:
    assert stack.broker_pid is not None
    events = synthetic_stream(engines=4, requests=6000, deployment=deployment, seed=8)
    half = len(events) // 2
    _publish(stack, events[:half])
    logs = {name: tmp_path / f"{name}.log" for name in ("stream", "policy")}
    services = {
        name: start_service(stack, name, deployment, logs[name], idle_exit_s=25.0) for name in ("stream", "policy")
    }
    store = RedisStore.from_url(stack.redis_url, deployment, 5.0)
    wait_until(
        lambda: applied_total(store) > 0 and bool(store.applied_offsets("policy")),
        120.0,
        "both services to commit before the outage",
    )
    store.close()
    os.kill(stack.broker_pid, signal.SIGSTOP)
    try:
        time.sleep(PAUSE_S)
    finally:
        os.kill(stack.broker_pid, signal.SIGCONT)
    _publish(stack, events[half:])
    assert services["stream"].wait(timeout=300) == 0
    assert services["policy"].wait(timeout=300) == 0
    for path in logs.values():
        names = _log_events(path)
        # Each outage a service notices is said once as it starts and once as it ends. How many it
        # notices depends on where each stood when the broker stopped (caught up, it may notice none;
        # a broker slow to answer after SIGCONT can make a second), so only the pairing is asserted.
        assert names.count("backend_unavailable") == names.count("backend_recovered")
        assert _governor_tracebacks(path) == []
    _assert_nothing_lost(stack, deployment, events, stack.redis_url)


def test_the_broker_paused_under_the_faust_runtime_mid_backlog_stops_nothing_and_loses_nothing(
    stack: StackState, deployment: str, tmp_path: Path
) -> None:
    """The broker stops while the faust worker folds a backlog: its fetches and deliveries wait (a delivery
    that fails is retried in place, folding again from the last commit), it does not exit, and nothing is lost."""
    assert stack.broker_pid is not None
    events = synthetic_stream(engines=4, requests=4000, deployment=deployment, seed=12)
    _publish(stack, events)
    log_path = tmp_path / "stream.log"
    worker = start_stream(stack, deployment, log_path, idle_exit_s=12.0, runtime="faust")
    store = RedisStore.from_url(stack.redis_url, deployment, 5.0)
    wait_until(lambda: applied_total(store) > 0, 90.0, "the faust worker to commit before the outage")
    os.kill(stack.broker_pid, signal.SIGSTOP)
    try:
        time.sleep(PAUSE_S)
    finally:
        os.kill(stack.broker_pid, signal.SIGCONT)
    assert worker.wait(timeout=180) == 0, log_path.read_text(errors="replace")[-2000:]
    names = _log_events(log_path)
    # A delivery waits up to its flush timeout (10 s, the pause's length) before it counts as failed, so
    # whether the worker notices an outage depends on where it stood; only the pairing is asserted.
    assert names.count("backend_unavailable") == names.count("backend_recovered")
    assert _governor_tracebacks(log_path) == []
    assert set(logged_snapshots(stack.kafka_bootstrap, deployment)) == folded_snapshots(events, deployment)
    engines = sorted({event.engine_id for event in events})
    assert summaries(store, deployment, engines) == folded_summaries(events, deployment)
    store.close()


class LostReplies(RedisStore):
    """Redis whose reply to every ``every``-th commit and policy write is lost after the write was done.

    That is what a client sees when Redis stalls past the client's timeout and then executes the
    queued call: the caller must retry without knowing the first try landed.
    """

    def __init__(self, url: str, deployment: str, every: int) -> None:
        store = RedisStore.from_url(url, deployment, 5.0)
        super().__init__(store._client, deployment)
        self._every = every
        self._calls = 0
        self.lost = 0

    def _lose_a_reply(self, what: str) -> None:
        self._calls += 1
        if self._calls % self._every == 0:
            self.lost += 1
            msg = f"redis {what} failed: Timeout reading from socket"
            raise BackendUnavailableError(msg, backend="redis")

    def commit(
        self,
        consumer: str,
        offsets: Mapping[str, int],
        states: Mapping[str, str],
        summaries: Mapping[str, str],
        expire_s: Mapping[str, int] | None = None,
    ) -> bool:
        done = super().commit(consumer, offsets, states, summaries, expire_s)
        self._lose_a_reply("commit")
        return done

    def put_policy(self, kind: str, scope: str, version: int, document_json: str) -> bool:
        done = super().put_policy(kind, scope, version, document_json)
        self._lose_a_reply("put_policy")
        return done


def test_writes_whose_reply_was_lost_are_retried_without_loss_or_double_counting(
    stack: StackState, deployment: str
) -> None:
    events = synthetic_stream(engines=4, requests=3000, deployment=deployment, seed=9)
    _publish(stack, events)
    stream_store = LostReplies(stack.redis_url, deployment, every=2)
    processor = StreamProcessor(
        deployment=deployment, bootstrap=stack.kafka_bootstrap, store=stream_store, registry=default_registry()
    )
    processor.run(idle_exit_s=4.0)
    processor.close()
    policy_store = LostReplies(stack.redis_url, deployment, every=40)
    service = PolicyService(
        deployment=deployment, bootstrap=stack.kafka_bootstrap, store=policy_store, registry=default_registry()
    )
    service.run(idle_exit_s=4.0)
    service.close()
    assert stream_store.lost > 0
    assert policy_store.lost > 0
    stream_store.close()
    policy_store.close()
    _assert_nothing_lost(stack, deployment, events, stack.redis_url)


def test_commits_whose_reply_was_lost_are_retried_by_a_faust_worker_that_goes_on_without_loss(
    stack: StackState, deployment: str
) -> None:
    """Each retry is refused (its first try landed) with every partition where the worker folded it:
    the worker's own commit, not a newer owner's, so it is not fenced."""
    events = synthetic_stream(engines=4, requests=1500, deployment=deployment, seed=14)
    _publish(stack, events)
    store = LostReplies(stack.redis_url, deployment, every=2)
    worker = FaustStreamProcessor(
        deployment=deployment, bootstrap=stack.kafka_bootstrap, store=store, registry=default_registry()
    )
    counters = worker.run(idle_exit_s=4.0)
    worker.close()
    assert store.lost > 0
    assert counters.commits_refused == store.lost
    engines = sorted({event.engine_id for event in events})
    assert summaries(store, deployment, engines) == folded_summaries(events, deployment)
    assert set(logged_snapshots(stack.kafka_bootstrap, deployment)) == folded_snapshots(events, deployment)
    store.close()
