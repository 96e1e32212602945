"""Crash safety and rebalancing of the stream processor on the real broker and Redis.

The reference for "nothing lost, nothing double-counted" is the pure fold of the same events in
one uninterrupted pass: after a SIGKILL and restart, or after a second processor joins and dies,
the summaries in Redis must equal it exactly.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from services.stack.launcher import StackState
from services.store.redis_store import RedisStore
from services.testing.streams import synthetic_stream
from tests.integration.decision_streams import folded_summaries
from tests.integration.processes import applied_total, start_stream, summaries, wait_until
from tests.integration.publishing import publish_all

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_sigkill_mid_stream_then_restart_gives_the_uninterrupted_estimates(
    stack: StackState, deployment: str, tmp_path: Path
) -> None:
    events = synthetic_stream(engines=4, requests=8000, deployment=deployment, seed=3)
    publish_all(stack.kafka_bootstrap, events)
    store = RedisStore.from_url(stack.redis_url, deployment, 5.0)
    first = start_stream(stack, deployment, tmp_path / "first.log")
    wait_until(lambda: applied_total(store) > 0, 60.0, "the first processor to commit a batch")
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    partially = applied_total(store)
    assert partially > 0
    second = start_stream(stack, deployment, tmp_path / "second.log", idle_exit_s=5.0)
    assert second.wait(timeout=180) == 0
    engines = sorted({e.engine_id for e in events})
    assert summaries(store, deployment, engines) == folded_summaries(events, deployment)
    store.close()


def test_a_second_processor_that_joins_and_dies_loses_and_doubles_nothing(
    stack: StackState, deployment: str, tmp_path: Path
) -> None:
    events = synthetic_stream(engines=8, requests=6000, deployment=deployment, seed=4)
    half = len(events) // 2
    publish_all(stack.kafka_bootstrap, events[:half])
    store = RedisStore.from_url(stack.redis_url, deployment, 5.0)
    survivor = start_stream(stack, deployment, tmp_path / "survivor.log", idle_exit_s=100.0)
    wait_until(lambda: applied_total(store) > 0, 60.0, "the first processor to commit a batch")
    joiner = start_stream(stack, deployment, tmp_path / "joiner.log")
    publish_all(stack.kafka_bootstrap, events[half:])
    wait_until(
        lambda: b"partitions_assigned" in (tmp_path / "joiner.log").read_bytes(),
        60.0,
        "the second processor to get partitions",
    )
    joiner.send_signal(signal.SIGKILL)
    joiner.wait(timeout=10)
    engines = sorted({e.engine_id for e in events})
    expected = folded_summaries(events, deployment)
    wait_until(
        lambda: summaries(store, deployment, engines) == expected,
        150.0,
        "the survivor to fold every event exactly once",
    )
    survivor.send_signal(signal.SIGTERM)
    assert survivor.wait(timeout=30) == 0
    store.close()
