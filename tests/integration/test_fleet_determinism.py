"""The fleet scope decides from the log alone: live pace, full speed and a rebuild after a Redis wipe agree.

A recorded demo stream is folded three ways on the real broker and Redis: paced while both services
run beside the publisher, at full speed with the services started after it, and again after every
key of that deployment is deleted (both services re-read their topics from the start, as after a
Redis loss). The FleetOpt decisions (version and payload) must be the same each time.
Each test runs with one core kept busy by a CPU burner (``busy_core``): the agreement must not
depend on a quiet machine.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from decide.specs import default_registry
from schemas.events import Event
from schemas.names import DECISIONS_TOPIC, ESTIMATES_TOPIC
from schemas.records import EstimateSnapshot
from services.replay.replay import read_topic, replay_events, replay_offline
from services.sdk.publisher import TelemetryPublisher
from services.stack.launcher import StackState
from services.store.redis_store import RedisStore
from services.testing.models import changed
from tests.fixtures import DEMO_FLEET_SLOT_S, recorded_sim_stream
from tests.integration.processes import start_service

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.usefixtures("busy_core")]

PACED_SPEED = 4.0  # event-time seconds per wall second while the services run beside the publisher


def _run_both(stack: StackState, deployment: str, logs: Path, publish: Callable[[], None] | None = None) -> None:
    """Run ``governor run stream`` and ``governor run policy`` until idle, while ``publish`` (if given) feeds telemetry.

    Each service is its own process, as deployed: in one process with the publisher they shared
    one interpreter lock, and fetches that came back a second late under load let contributions
    reach the fleet out of event-time order (docs/contracts.md, "read to its end"). With the log
    complete (no ``publish``) the policy service starts once the stream processor has read it all:
    started beside it on a loaded machine, it found nothing to read for its idle exit while the
    processor was still re-folding, and left with nothing decided.
    """
    slot = ["--fleet-slot-s", str(DEMO_FLEET_SLOT_S)]
    processes: dict[str, subprocess.Popen[bytes]] = {}

    def start(name: str, idle_exit_s: float) -> None:
        log_path = logs / f"{name}.log"
        processes[name] = start_service(stack, name, deployment, log_path, idle_exit_s=idle_exit_s, extra=slot)

    def finish(name: str) -> None:
        assert processes[name].wait(timeout=300) == 0, (logs / f"{name}.log").read_text()[-2000:]

    try:
        start("stream", 5.0)
        if publish is None:
            finish("stream")
            start("policy", 10.0)
        else:
            start("policy", 10.0)
            publish()
            finish("stream")
        finish("policy")
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)


def _publish(stack: StackState, events: list[Event], speed: float | None) -> None:
    publisher = TelemetryPublisher(stack.kafka_bootstrap, block_when_full=True)
    replay_events(events, publisher, speed=speed)
    assert publisher.flush(180.0)  # a loaded machine (load average 12) took over 60 s on Apache Kafka
    publisher.close()
    assert publisher.stats().dropped == 0, "the broker did not take every event: the runs cannot agree"


def _fleetopt_decisions(stack: StackState, deployment: str) -> list[tuple[int, str]]:
    found = []
    for value in read_topic(stack.kafka_bootstrap, DECISIONS_TOPIC):
        record = json.loads(value)
        if record["deployment"] == deployment and record["kind"] == "fleetopt" and record["accepted"]:
            found.append((record["version"], json.dumps(record["document"]["payload"], sort_keys=True)))
    return found


def _flush(stack: StackState, deployment: str) -> None:
    store = RedisStore.from_url(stack.redis_url, deployment, 5.0)
    store.flush_deployment()
    store.close()


def test_fleetopt_decisions_are_the_same_live_at_full_speed_and_after_a_redis_wipe(
    stack: StackState, tmp_path: Path
) -> None:
    suffix = uuid.uuid4().hex[:8]
    logs = {name: tmp_path / name for name in ("live", "fast", "rebuild")}
    for folder in logs.values():
        folder.mkdir()
    live_deployment, fast_deployment = f"fleet-live-{suffix}", f"fleet-fast-{suffix}"
    live_events = recorded_sim_stream(tmp_path / "live.jsonl.gz", duration_s=40.0, deployment=live_deployment)
    fast_events = [changed(event, deployment=fast_deployment) for event in live_events]  # one recording, relabelled
    try:
        _run_both(stack, live_deployment, logs["live"], lambda: _publish(stack, live_events, PACED_SPEED))
        live = _fleetopt_decisions(stack, live_deployment)
        assert len(live) >= 3

        _publish(stack, fast_events, None)
        _run_both(stack, fast_deployment, logs["fast"])
        fast = _fleetopt_decisions(stack, fast_deployment)
        assert fast == live

        _flush(stack, fast_deployment)
        _run_both(stack, fast_deployment, logs["rebuild"])
        rebuilt = _fleetopt_decisions(stack, fast_deployment)[len(fast) :]
        assert rebuilt == live
    finally:
        _flush(stack, live_deployment)
        _flush(stack, fast_deployment)


def test_an_engine_that_stops_is_declared_silent_after_the_wait_and_the_fleet_decides_as_the_offline_replay(
    stack: StackState, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The live rule waits on an engine far behind (it may be late only in the reading), then declares it
    silent through the fleet partition; with the engine really gone, the plans equal the offline replay's,
    which finds it silent at once."""
    deployment = f"fleet-stop-{uuid.uuid4().hex[:8]}"
    recorded = recorded_sim_stream(tmp_path / "stop.jsonl.gz", duration_s=60.0, deployment=deployment)
    stopped = sorted({e.engine_id for e in recorded})[0]
    events = [e for e in recorded if not (e.engine_id == stopped and e.ts > 15.0)]
    offline = replay_offline(events, default_registry(fleet_slot_s=DEMO_FLEET_SLOT_S))
    expected = [
        (d.version, json.dumps(d.document["payload"], sort_keys=True))
        for d in offline.decisions
        if d.kind == "fleetopt" and d.accepted
    ]
    assert len(expected) >= 6
    monkeypatch.setenv("GOVERNOR_FLEET_SILENCE_WAIT_S", "3")
    logs = tmp_path / "logs"
    logs.mkdir()
    try:
        _publish(stack, events, None)
        _run_both(stack, deployment, logs)
        assert _fleetopt_decisions(stack, deployment) == expected
    finally:
        _flush(stack, deployment)
    declared = [
        json.loads(line)
        for line in (logs / "policy.log").read_text().splitlines()
        if '"engine_declared_silent"' in line
    ]
    assert [(line["engine_id"], line["waited_s"] >= 3.0) for line in declared] == [(stopped, True)]
    silences = [
        EstimateSnapshot.model_validate_json(value)
        for value in read_topic(stack.kafka_bootstrap, ESTIMATES_TOPIC)
        if b'"fleet_silence"' in value and deployment.encode() in value
    ]
    assert [(s.scope, getattr(s.estimates, "engine", None)) for s in silences] == [("fleet", stopped)]
