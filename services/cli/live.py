"""A simulated fleet under live control: the local stack, the two services, and a paced run against them.

Shared by ``governor demo`` and ``governor sim --control live``. ``run_governed_live`` starts the
local stack (broker and Redis), the stream processor and the policy service as child processes,
waits until the stream processor consumes, runs the scenario in live mode (engines publish through
the SDK publisher and obey what they read through the SDK policy client), waits until the services
have consumed everything, stops them, and returns the run with the policy versions the engines
applied and the GPUs of the last FleetOpt plan.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kafka import TopicPartition

from schemas.names import ESTIMATES_TOPIC, TELEMETRY_TOPIC, Partition
from services.cli.options import settings_stack
from services.kafka_security import kafka_consumer
from services.sdk.policy_client import PolicyClient
from services.sdk.publisher import TelemetryPublisher
from services.settings import Settings
from services.sim import ProgressSample, Scenario, run_live
from services.sim.compare import PolicyChange, PolicyChangeRecorder, planned_gpus
from services.sim.run_summary import RunSummary
from services.stack.launcher import StackState, stack_down
from services.store.redis_store import RedisStore

SERVICES_READY_TIMEOUT_S = 60.0
SERVICES_STALL_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class Backlog:
    """What the services had not consumed when the run stopped waiting for them.

    Attributes:
        stream: ``gov.telemetry`` records past the stream processor's applied offsets.
        policy: ``gov.estimates`` records past the policy service's committed offsets.
    """

    stream: int
    policy: int

    @property
    def total(self) -> int:
        return self.stream + self.policy

    def __str__(self) -> str:
        return f"stream processor {self.stream} telemetry records behind, policy service {self.policy} estimates behind"


@dataclass(frozen=True, slots=True, kw_only=True)
class LiveRun:
    """What a live governed run produced.

    Attributes:
        summary: the fleet's metrics.
        policy_changes: the policy versions the engines applied (their ``policy.applied`` events).
        planned_gpus: n_s + n_l of the FleetOpt plan in Redis at the end, or None without one.
        delivered: telemetry events the publisher delivered.
        dropped: telemetry events it dropped (the broker was away or its buffer full).
        backlog: what the services had not consumed when they were stopped (none: they caught up).
        service_codes: each service's exit code.
        state: the stack the run used.
        elapsed_s: wall seconds from the fleet's start to the services' stop.
    """

    summary: RunSummary
    policy_changes: tuple[PolicyChange, ...]
    planned_gpus: int | None
    delivered: int
    dropped: int
    backlog: Backlog
    service_codes: dict[str, int]
    state: StackState
    elapsed_s: float

    @property
    def caught_up(self) -> bool:
        """Whether the services had consumed everything before they were stopped."""
        return self.backlog.total == 0


def start_service(
    service: str,
    state: StackState,
    deployment: str,
    fleet_slot_s: float,
    log_path: Path,
    *,
    config: Path | None,
    shadows: tuple[str, ...],
    stream_runtime: str,
) -> subprocess.Popen[bytes]:
    argv = [
        sys.executable,
        "-m",
        "services.cli",
        "run",
        service,
        "--deployment",
        deployment,
        "--kafka-bootstrap",
        state.kafka_bootstrap,
        "--redis-url",
        state.redis_url,
        "--metrics-port",
        "0",
        "--fleet-slot-s",
        f"{fleet_slot_s:g}",
        *([] if config is None else ["--config", str(config)]),
        *(arg for shadow in (shadows if service == "policy" else ()) for arg in ("--shadow", shadow)),
    ]
    if service == "stream":
        argv += ["--runtime", stream_runtime]
    with log_path.open("ab") as log:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)


def stop_service(process: subprocess.Popen[bytes]) -> int:
    process.terminate()
    try:
        return process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait(timeout=10)


def _wait_for_services(state: StackState, deployment: str, stall_s: float, settings: Settings) -> Backlog:
    """Wait until the stream processor and the policy service have consumed everything produced so far.

    They are waited on as long as they make progress (a loaded machine may need minutes to fold a
    backlog); the wait ends ``stall_s`` after the backlog last shrank, and returns what was left.
    """
    store = RedisStore.from_url(state.redis_url, deployment, 2.0, settings.redis_security())
    consumer = kafka_consumer(state.kafka_bootstrap, settings.kafka_security())
    policy_group = kafka_consumer(
        state.kafka_bootstrap,
        settings.kafka_security(),
        group_id=f"governor-policy-{deployment}",
        enable_auto_commit=False,
    )
    telemetry = [TopicPartition(TELEMETRY_TOPIC, p) for p in consumer.partitions_for_topic(TELEMETRY_TOPIC) or ()]
    estimates = [TopicPartition(ESTIMATES_TOPIC, p) for p in consumer.partitions_for_topic(ESTIMATES_TOPIC) or ()]
    deadline = time.monotonic() + stall_s
    smallest: int | None = None
    try:
        while True:
            ends = consumer.end_offsets(telemetry + estimates)
            applied = store.applied_offsets("stream")
            backlog = Backlog(
                stream=sum(max(0, ends[tp] - 1 - applied.get(Partition(*tp).field, -1)) for tp in telemetry),
                policy=sum(max(0, ends[tp] - (policy_group.committed(tp) or 0)) for tp in estimates),
            )
            if backlog.total == 0:
                return backlog
            if smallest is None or backlog.total < smallest:
                smallest = backlog.total
                deadline = time.monotonic() + stall_s
            if time.monotonic() >= deadline:
                return backlog
            time.sleep(0.25)
    finally:
        consumer.close()
        policy_group.close()
        store.close()


def wait_until_consuming(log_path: Path, process: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Wait until the service logs ``partitions_assigned`` with partitions (its JSON log), or it exits.

    The fleet starts only then, so that the first policies reach the engines within seconds of
    event time instead of after the services' start-up (imports and the group join take ~15 s here).
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        for line in log_path.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and record.get("event") == "partitions_assigned" and record.get("partitions"):
                return True
        time.sleep(0.25)
    return False


def run_governed_live(
    scenario: Scenario,
    *,
    settings: Settings,
    out_dir: Path,
    speed: float,
    fleet_slot_s: float,
    say: Callable[[str], None],
    progress: Callable[[PolicyClient], Callable[[ProgressSample], None]] | None = None,
    config: Path | None = None,
    shadows: tuple[str, ...] = (),
) -> LiveRun:
    """Run ``scenario`` (its ``deployment`` names the run in Kafka and Redis) under the live services.

    Args:
        scenario: the fleet and workload; give it a deployment of its own per run.
        settings: state dir, Redis URL and timeouts of the local stack, and the stream processor's runtime.
        out_dir: where the services' logs go.
        speed: simulated seconds per wall second.
        fleet_slot_s: the services' fleet-scope slot (FleetOpt decides once per closed slot), seconds.
        say: prints one line of what is happening (the stack, the services, the fleet).
        progress: builds the progress callback from the run's policy client, or None.
        config: the policy configuration file both services run with (docs/operations.md), or None.
        shadows: ``NAME=CONFIG`` shadow policies the policy service decides beside the live one.
    """
    deployment = scenario.deployment
    state = settings_stack(settings)
    say(f"stack: kafka {state.kafka_bootstrap}, redis {state.redis_url}; deployment {deployment}")
    logs = {name: out_dir / f"{name}.log" for name in ("stream", "policy")}
    services = {
        name: start_service(
            name,
            state,
            deployment,
            fleet_slot_s,
            log,
            config=config,
            shadows=shadows,
            stream_runtime=settings.stream_runtime,
        )
        for name, log in logs.items()
    }
    say(
        f"services: stream processor pid {services['stream'].pid} ({settings.stream_runtime} runtime), "
        f"policy service pid {services['policy'].pid} "
        f"(logs in {out_dir}); fleet slot {fleet_slot_s:g} s"
    )
    started = time.monotonic()
    try:
        if not wait_until_consuming(logs["stream"], services["stream"], SERVICES_READY_TIMEOUT_S):
            say("warning: the stream processor has not joined its group yet; starting the fleet anyway")
        # The simulated fleet is a tool's, not an engine's step loop: it waits out a slow broker (the tool's
        # send timeout) rather than dropping events. On a loaded 2-core CI machine an engine's 5 s timeout
        # expired 652 of 45,907 events and the run, which promises that every event reached the services,
        # failed.
        publisher = TelemetryPublisher(state.kafka_bootstrap, security=settings.kafka_security(), block_when_full=True)
        recorder = PolicyChangeRecorder(publisher)
        client = PolicyClient(
            state.redis_url,
            deployment,
            poll_interval_s=0.25,
            security=settings.redis_security(),
            keyring=settings.policy_keyring(),
        )
        say(f"fleet: {scenario.name}: {scenario.description} ({scenario.duration_s:.0f} s at speed {speed:g})")
        started = time.monotonic()
        try:
            summary = run_live(
                scenario,
                sink=recorder,
                policy_source=client,
                speed=speed,
                progress=None if progress is None else progress(client),
            )
            plan_gpus = planned_gpus(client, scenario.duration_s)
        finally:
            publisher.close()
            client.close()
        backlog = _wait_for_services(state, deployment, SERVICES_STALL_TIMEOUT_S, settings)
    finally:
        codes = {name: stop_service(process) for name, process in services.items()}
    stats = publisher.stats()
    return LiveRun(
        summary=summary,
        policy_changes=tuple(recorder.changes),
        planned_gpus=plan_gpus,
        delivered=stats.delivered,
        dropped=stats.dropped,
        backlog=backlog,
        service_codes=codes,
        state=state,
        elapsed_s=time.monotonic() - started,
    )


def clean_up_run(settings: Settings, redis_url: str, deployment: str, *, stop_stack: bool, starter: str) -> str:
    """Remove ``deployment``'s Redis keys, and stop the stack when ``starter`` started it; say what was done."""
    store = RedisStore.from_url(redis_url, deployment, settings.redis_timeout_s, settings.redis_security())
    try:
        removed = store.flush_deployment()
    finally:
        store.close()
    if stop_stack:
        stack_down(settings.state_dir)
        return f"cleanup: removed {removed} Redis keys of {deployment}; stopped the stack {starter} started"
    return f"cleanup: removed {removed} Redis keys of {deployment}; the stack was running before and keeps running"
