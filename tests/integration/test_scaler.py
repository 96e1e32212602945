"""The scaler against the real broker and Redis: a plan in Redis resizes the pools, every action lands on gov.scaling.

The FleetOpt document is written where the policy service writes it (``gov:{dep}:policy:fleetopt:fleet``) and
read through the SDK's ``PolicyClient``; actions go through ``KafkaActionSink`` and are read back with
``read_actions``. ``governor scale`` itself runs as a process for the advisory case, answering /healthz.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from schemas.names import policy_key
from schemas.scaling import ScalerConfig
from services.cli.status import render
from services.health import ServiceMetrics
from services.inspection import collect_pool_status, collect_status
from services.scaler import KafkaActionSink, MemoryConnector, ScalerMetrics, ScalerService
from services.scaler.actions import read_actions
from services.sdk.policy_client import PolicyClient
from services.stack.launcher import StackState
from services.stack.processes import free_port
from tests.integration.processes import wait_until
from tests.unit.scaler.plans import fleetopt_plan

pytestmark = pytest.mark.integration

NOW_S = 5000.0
CONFIG = {
    "mode": "act",
    "pools": {
        "short": {
            "min_replicas": 1,
            "max_replicas": 8,
            "max_step_replicas": 8,
            "cooldown_s": 0.0,
            "connector": "memory",
        },
        "long": {
            "min_replicas": 1,
            "max_replicas": 4,
            "gpus_per_replica": 2,
            "max_step_replicas": 4,
            "cooldown_s": 0.0,
            "scale_down_hold_s": 60.0,
            "connector": "memory",
        },
    },
}


def put_plan(
    client: redis.Redis, deployment: str, *, short_gpus: int, long_gpus: int, version: int, computed_at: float = NOW_S
) -> None:
    plan = fleetopt_plan(short_gpus=short_gpus, long_gpus=long_gpus, version=version, computed_at=computed_at)
    document = plan.model_copy(update={"deployment": deployment})
    client.set(policy_key(deployment, "fleetopt", "fleet"), document.model_dump_json())


@pytest.fixture
def plans(stack: StackState, deployment: str) -> Iterator[PolicyClient]:
    """A policy client refreshed by the test itself (``refresh``), so no pass races the write."""
    client = PolicyClient(stack.redis_url, deployment, start=False)
    client.watch("fleetopt", "fleet")
    yield client
    client.close()


def scaler(
    stack: StackState, deployment: str, plans: PolicyClient, config: ScalerConfig
) -> tuple[ScalerService, dict[str, MemoryConnector]]:
    connectors = {"short": MemoryConnector("short", 1), "long": MemoryConnector("long", 1)}
    service = ScalerService(
        config=config,
        deployment=deployment,
        scaler_id="scaler-it",
        plans=plans,
        connectors=connectors,
        sink=KafkaActionSink(stack.kafka_bootstrap, timeout_s=10.0),
        metrics=ScalerMetrics(ServiceMetrics("scaler", deployment)),
        clock=lambda: NOW_S,
    )
    return service, connectors


def test_plans_in_redis_resize_the_pools_and_every_action_is_on_the_log(
    stack: StackState, deployment: str, redis_client: redis.Redis, plans: PolicyClient
) -> None:
    service, connectors = scaler(stack, deployment, plans, ScalerConfig.model_validate(CONFIG))
    try:
        put_plan(redis_client, deployment, short_gpus=5, long_gpus=6, version=1)
        plans.refresh()
        service.step()
        put_plan(redis_client, deployment, short_gpus=7, long_gpus=6, version=2)
        plans.refresh()
        service.step()
    finally:
        service.close()
    assert (connectors["short"].replicas(), connectors["long"].replicas()) == (7, 3)
    logged = read_actions(stack.kafka_bootstrap, deployment, timeout_s=10.0)
    assert [(a.pool, a.from_replicas, a.to_replicas, a.plan_version, a.result) for a in logged] == [
        ("long", 1, 3, 1, "applied"),
        ("short", 1, 5, 1, "applied"),
        ("short", 5, 7, 2, "applied"),
    ]
    assert [a.seq for a in logged] == [0, 1, 2]
    report = collect_status(
        stack.redis_url, stack.kafka_bootstrap, deployment, redis_timeout_s=5.0, kafka_timeout_s=10.0
    )
    assert [(p.pool, p.replicas, p.desired_replicas, p.plan_version, p.actions) for p in report.pools] == [
        ("long", 3, 3, 1, 1),
        ("short", 7, 7, 2, 2),
    ]
    rows = [line.split() for line in render(report).splitlines()]
    assert ["short", "7", "7", "scale_up", "applied", "act", "v2", "5000.0", "2", "0"] in rows


def test_advisory_governor_scale_records_actions_and_serves_health(
    stack: StackState, deployment: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    """``governor scale --advisory`` on in-memory pools: the actions are on the log, marked advisory.

    The service's event time is the wall clock, so the plan is stamped with it to be in force.
    """
    put_plan(redis_client, deployment, short_gpus=3, long_gpus=2, version=4, computed_at=time.time())
    lines = ['mode = "act"', "interval_s = 0.2"]
    for name, pool in CONFIG["pools"].items():
        lines.append(f"[pools.{name}]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in pool.items()]
    config = tmp_path / "scaler.toml"
    config.write_text("\n".join(lines) + "\n")
    port = free_port()
    argv = [sys.executable, "-m", "services.cli", "scale", "--config", str(config), "--advisory"]
    argv += ["--deployment", deployment, "--kafka-bootstrap", stack.kafka_bootstrap, "--redis-url", stack.redis_url]
    argv += ["--metrics-port", str(port), "--idle-exit-s", "10"]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_until(lambda: collect_pool_status(stack.kafka_bootstrap, deployment, timeout_s=5.0), 60.0, "an action")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5.0) as response:
            health = json.loads(response.read())
        assert (health["healthy"], health["mode"]) == (True, "advisory")
        output, _ = process.communicate(timeout=60.0)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, output
    logged = read_actions(stack.kafka_bootstrap, deployment, timeout_s=10.0)
    assert [(a.pool, a.to_replicas, a.result, a.mode, a.plan_version) for a in logged] == [
        ("short", 3, "advisory", "advisory", 4),
    ]
