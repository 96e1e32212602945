"""Twenty SIGKILLs in a row, of either service at seeded random moments, change nothing in the end.

A fleet's telemetry arrives over a minute; ``governor run stream`` and ``governor run policy`` run
as processes, and twenty times one of them, picked at random, is killed with SIGKILL a random
pause after its first commit since it started, and started again. Then both run until idle. The
stored estimates must equal a pure fold of the stream and the accepted decisions must equal an
uninterrupted offline replay's, version for version and payload for payload: nothing lost,
nothing folded or decided twice.

The fleet's contributions ride on the same guarantees: one the processor held when it was killed
is in its engine's committed state, and the next owner loads such engines at assignment and
releases them, so FleetOpt's plans are the uninterrupted replay's too.
"""

from __future__ import annotations

import json
import random
import subprocess
import threading
import time
from pathlib import Path

import pytest

from decide.specs import default_registry
from schemas.names import DECISIONS_TOPIC
from services.replay.replay import read_topic, replay_events, replay_offline
from services.sdk.publisher import TelemetryPublisher
from services.stack.launcher import StackState
from services.store.redis_store import RedisStore
from services.testing.streams import synthetic_stream
from tests.integration.processes import applied_total, start_service, summaries

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KILLS = 20
PUBLISH_S = 60.0  # the telemetry arrives over a minute, while the services are being killed
SERVICES = ("stream", "policy")
COMMIT_WAIT_S = 10.0


def _accepted(stack: StackState, deployment: str) -> dict[tuple[str, str, int], set[str]]:
    """The payloads of every accepted policy decision, by (kind, scope, version)."""
    found: dict[tuple[str, str, int], set[str]] = {}
    for value in read_topic(stack.kafka_bootstrap, DECISIONS_TOPIC):
        record = json.loads(value)
        if record["deployment"] == deployment and record["accepted"] and record.get("origin", "policy") == "policy":
            key = (record["kind"], record["scope"], record["version"])
            found.setdefault(key, set()).add(json.dumps(record["document"]["payload"]))
    return found


def _committed(store: RedisStore, service: str) -> int:
    """Sum over partitions of (applied offset + 1) of ``service``'s commits."""
    return sum(offset + 1 for offset in store.applied_offsets(service).values())


def _await_a_commit(store: RedisStore, service: str, since: int) -> None:
    """Wait (at most ``COMMIT_WAIT_S``) for ``service`` to commit past ``since``: its restart has caught on.

    The random pause before a kill starts from there, so that on a busy machine the kills still
    land while the service works, not while it is still starting.
    """
    deadline = time.monotonic() + COMMIT_WAIT_S
    while time.monotonic() < deadline and _committed(store, service) <= since:
        time.sleep(0.1)


def test_twenty_random_kills_of_either_service_leave_the_uninterrupted_estimates_and_decisions(
    stack: StackState, deployment: str, tmp_path: Path
) -> None:
    events = synthetic_stream(engines=4, requests=10_000, deployment=deployment, seed=20)
    publisher = TelemetryPublisher(stack.kafka_bootstrap, block_when_full=True)
    speed = (events[-1].ts - events[0].ts) / PUBLISH_S
    feeding = threading.Thread(target=replay_events, args=(events, publisher), kwargs={"speed": speed})
    feeding.start()
    rng = random.Random(KILLS)
    store = RedisStore.from_url(stack.redis_url, deployment, 5.0)
    progress = []
    running = {name: start_service(stack, name, deployment, tmp_path / f"{name}.log") for name in SERVICES}
    started_at = {name: _committed(store, name) for name in SERVICES}
    for _ in range(KILLS):
        victim = rng.choice(SERVICES)
        _await_a_commit(store, victim, started_at[victim])
        progress.append(applied_total(store))
        try:
            running[victim].wait(timeout=rng.uniform(0.0, 4.0))
        except subprocess.TimeoutExpired:
            running[victim].kill()
            running[victim].wait(timeout=30)
        else:
            raise AssertionError(
                f"the {victim} service exited by itself: {(tmp_path / f'{victim}.log').read_text()[-2000:]}"
            )
        started_at[victim] = _committed(store, victim)
        running[victim] = start_service(stack, victim, deployment, tmp_path / f"{victim}.log")
    feeding.join(timeout=300)
    assert publisher.flush(60.0)
    publisher.close()
    for process in running.values():
        process.kill()
        process.wait(timeout=30)
    for name in SERVICES:
        final = start_service(stack, name, deployment, tmp_path / f"{name}.log", idle_exit_s=6.0)
        assert final.wait(timeout=300) == 0, (tmp_path / f"{name}.log").read_text()[-2000:]

    finished = applied_total(store)
    assert len({p for p in progress if 0 < p < finished}) >= 3, progress  # kills landed mid-stream
    offline = replay_offline(events, default_registry())
    engines = sorted({e.engine_id for e in events})
    stored = summaries(store, deployment, engines)
    store.close()
    assert stored == {engine: json.loads(offline.folder.summary_json(engine)) for engine in engines}
    expected = {
        (d.kind, d.scope, d.version): {json.dumps(d.document["payload"])} for d in offline.decisions if d.accepted
    }
    assert len(expected) > 50
    accepted = _accepted(stack, deployment)
    assert sorted(accepted) == sorted(expected)
    assert {key: payloads for key, payloads in accepted.items() if payloads != expected[key]} == {}
    assert any(scope == "fleet" for _, scope, _ in accepted)
