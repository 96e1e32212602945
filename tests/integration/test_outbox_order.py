"""The outbox order on the real broker and Redis: each service dies between its steps and loses nothing.

A stream processor dies mid-batch (an error after the fold, before its snapshots are produced, that
unwinds through ``close``) or is killed after its snapshots are delivered but before the commit; a
policy service is killed after its decision records are delivered but before the Redis writes, or
after the writes but before the commit. Restarted, the processor has put every snapshot of the pure
fold on ``gov.estimates`` and the policy service every decision of an uninterrupted pass on
``gov.policy.decisions``, and every document in Redis has its record there (tests/integration/crash_driver.py
dies at the chosen step; tests/integration/decision_streams.py gives the references).
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import redis

from services.stack.launcher import StackState
from services.store.redis_store import RedisStore
from services.testing.streams import synthetic_stream
from tests.integration.decision_streams import (
    folded_snapshots,
    folded_summaries,
    logged_decisions,
    logged_snapshots,
    reference_decisions,
    stored_documents,
)
from tests.integration.processes import start_crash_driver, summaries
from tests.integration.publishing import publish_all

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KILLED = -signal.SIGKILL
RAISED = 1


def _publish(stack: StackState, events: list) -> None:
    publish_all(stack.kafka_bootstrap, events)


@pytest.mark.parametrize(
    "death", [("snapshots_folded", "raise", RAISED), ("snapshots_flushed", "kill", KILLED)], ids=["raise", "kill"]
)
def test_a_stream_processor_dying_between_fold_delivery_and_commit_loses_no_snapshot(
    stack: StackState, deployment: str, tmp_path: Path, death: tuple[str, str, int]
) -> None:
    point, how, exit_code = death
    events = synthetic_stream(engines=4, requests=4000, deployment=deployment, seed=5)
    _publish(stack, events)
    dying = start_crash_driver(
        stack, "stream", deployment, tmp_path / "dying.log", "--die-at", point, "--after", "3", "--how", how
    )
    assert dying.wait(timeout=180) == exit_code
    restarted = start_crash_driver(stack, "stream", deployment, tmp_path / "restarted.log")
    assert restarted.wait(timeout=300) == 0
    logged = logged_snapshots(stack.kafka_bootstrap, deployment)
    assert set(logged) == folded_snapshots(events, deployment)
    if how == "kill":
        assert len(logged) > len(set(logged)), "the killed batch's snapshots were delivered, so some are replayed"
    store = RedisStore.from_url(stack.redis_url, deployment, 5.0)
    engines = sorted({event.engine_id for event in events})
    assert summaries(store, deployment, engines) == folded_summaries(events, deployment)
    store.close()


@pytest.mark.parametrize("point", ["decisions_flushed", "decisions_written"])
def test_a_policy_service_killed_between_records_writes_and_commit_loses_no_decision_record(
    stack: StackState, deployment: str, tmp_path: Path, redis_client: redis.Redis, point: str
) -> None:
    events = synthetic_stream(engines=4, requests=4000, deployment=deployment, seed=6)
    _publish(stack, events)
    stream = start_crash_driver(stack, "stream", deployment, tmp_path / "stream.log")
    dying = start_crash_driver(
        stack,
        "policy",
        deployment,
        tmp_path / "dying.log",
        *("--die-at", point, "--after", "2", "--how", "kill"),
        # It dies at the point; the long idle exit only keeps it waiting, on a busy machine, for the
        # stream processor (started just before, joining its group) to produce the first snapshots.
        *("--idle-exit-s", "60"),
    )
    assert dying.wait(timeout=180) == KILLED
    at_kill = stored_documents(redis_client, deployment)
    on_log_at_kill = {
        (kind, scope): version for kind, scope, version, _ in logged_decisions(stack.kafka_bootstrap, deployment)
    }
    if point == "decisions_flushed":
        assert any(version > at_kill.get(key, {}).get("version", 0) for key, version in on_log_at_kill.items()), (
            "killed after delivery, before the writes: some records are ahead of Redis"
        )
    assert all(on_log_at_kill.get(key, 0) >= document["version"] for key, document in at_kill.items()), (
        "no document is in Redis before its record is on the log"
    )
    assert stream.wait(timeout=300) == 0
    restarted = start_crash_driver(stack, "policy", deployment, tmp_path / "restarted.log")
    assert restarted.wait(timeout=180) == 0

    logged = logged_decisions(stack.kafka_bootstrap, deployment)
    assert logged
    assert logged == reference_decisions(stack.kafka_bootstrap, deployment)
    last_logged = {(kind, scope): json.loads(document) for kind, scope, _, document in logged}
    assert stored_documents(redis_client, deployment) == last_logged
