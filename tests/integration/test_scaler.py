"""The scaler against the real broker and Redis: a plan in Redis resizes the pools, every action lands on gov.scaling.

The FleetOpt document is written where the policy service writes it (``gov:{dep}:policy:fleetopt:fleet``) and
read through the SDK's ``PolicyClient``; actions go through ``KafkaActionSink`` and are read back with
``read_actions``. ``governor scale`` itself runs as a process for the advisory case, answering /healthz.
The local connector runs real vLLM CPU servers (the tiny random Llama, one thread each, at most two at once).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from schemas.names import policy_key
from schemas.scaling import ScalerConfig
from services.cli.scale import gateway_admin
from services.cli.status import render
from services.engines.vllm.tiny_servers import TINY_MODEL
from services.health import ServiceMetrics
from services.inspection import collect_pool_status, collect_status
from services.scaler import KafkaActionSink, MemoryConnector, ScalerMetrics, ScalerService
from services.scaler.actions import read_actions
from services.scaler.local_engines import LocalEngineConnector, engine_in_flight, healthy
from services.sdk.policy_client import PolicyClient
from services.stack.launcher import StackState
from services.stack.processes import free_port, port_open
from services.testing.models import changed
from services.testing.plans import fleetopt_plan
from tests.integration.processes import wait_until

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
    document = changed(plan, deployment=deployment)
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


def test_governor_explain_scaling_reads_an_action_back_from_the_log(
    stack: StackState, deployment: str, redis_client: redis.Redis, plans: PolicyClient
) -> None:
    """``governor explain scaling POOL --seq N`` explains the action the scaler appended, from the log alone."""
    config = ScalerConfig.model_validate(CONFIG)
    service, _ = scaler(stack, deployment, plans, config)
    try:
        put_plan(redis_client, deployment, short_gpus=5, long_gpus=2, version=1)
        plans.refresh()
        service.step()
    finally:
        service.close()
    argv = [sys.executable, "-m", "services.cli", "explain", "scaling"]
    flags = ["--deployment", deployment, "--kafka-bootstrap", stack.kafka_bootstrap, "--kafka-timeout-s", "10"]
    explained = subprocess.run([*argv, "short", "--seq", "0", *flags], capture_output=True, text=True, check=False)
    assert explained.returncode == 0, explained.stderr
    assert explained.stdout.splitlines() == [
        "short: 1 -> 5 replicas at t=5000.000 s, scale_up, applied by memory/short (scaler scaler-it, seq 0)",
        "rule       the plan wants more replicas than the pool runs; scale-ups are not held, only step-limited",
        "plan       fleetopt fleet v1 computed at t=5000.000 s: short n_gpus=5 = 5 replicas of 1 GPU(s)",
        "           (its decision is not on gov.policy.decisions)",
        "bounds     [1, 8]: desired 5",
        "step       at most 8 per action: moved 4",
        "cool-down  0 s: the pool's first change",
    ]
    unknown = subprocess.run([*argv, "medium", *flags], capture_output=True, text=True, check=False)
    assert unknown.returncode == 2
    assert "no scaling action of pool medium on gov.scaling (pools with actions: short)" in unknown.stderr


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


VLLM_START_S = 900.0  # a vLLM CPU server's start on a loaded two-core machine (about 5 min seen); never asserted
LONG_REQUEST_TOKENS = 480


def vllm_command(model: Path) -> list[str]:
    """A vLLM OpenAI server on the tiny random Llama, one thread, token-id prompts (no tokenizer), on ``{port}``."""
    return [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        *("--model", str(model), "--served-model-name", "tiny", "--load-format", "dummy", "--dtype", "float32"),
        *("--max-model-len", "512", "--max-num-seqs", "4", "--enforce-eager", "--seed", "0"),
        *("--skip-tokenizer-init", "--host", "127.0.0.1", "--port", "{port}"),
    ]


def local_config(
    stack: StackState, deployment: str, tmp_path: Path, *, mode: str = "act", pinned: int | None = None
) -> ScalerConfig:
    """One local pool, ``short``: 1 to 2 replicas, one at a time, no cool-down or hold (the test steps the passes)."""
    engine_env = {
        "OMP_NUM_THREADS": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "GOVERNOR_DEPLOYMENT": deployment,
        "GOVERNOR_KAFKA_BOOTSTRAP": stack.kafka_bootstrap,
        "REDIS_URL": stack.redis_url,
    }
    first_port = free_block(2)
    pool = {
        "min_replicas": 1,
        "max_replicas": 2,
        "max_step_replicas": 1,
        "cooldown_s": 0.0,
        "scale_down_hold_s": 0.0,
        "pinned_replicas": pinned,
        "connector": "local",
        "local": {
            "command": vllm_command(TINY_MODEL),
            "first_port": first_port,
            "env": engine_env,
            "log_dir": str(tmp_path / "engines"),
            "start_timeout_s": VLLM_START_S,
            "drain_timeout_s": 120.0,
            "stop_timeout_s": 60.0,
        },
    }
    return ScalerConfig.model_validate({"mode": mode, "pools": {"short": pool}})


def free(port: int) -> bool:
    """Nothing listens on ``port`` here."""
    return not port_open("127.0.0.1", port)


def bindable(port: int) -> bool:
    """A server could listen on ``port`` now: nothing listens there and no connection has it as its local end."""
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_block(count: int) -> int:
    """The first of ``count`` consecutive ports that bind now, below the ephemeral range (32768 and up on Linux).

    The replicas bind ``first_port + slot`` one scaler pass apart. Taken from the ephemeral range, that
    second port was the local end of some Kafka or Redis client's connection by then (a replica exited
    with "Address already in use"); below it only a server told its port binds one. The scan starts at
    a place of this process's own, so xdist's workers look in different blocks.
    """
    start = 20_000 + 10 * (os.getpid() % 1_000)
    for first in range(start, 32_768 - count, count):
        if all(bindable(first + i) for i in range(count)):
            return first
    msg = f"no {count} consecutive ports bind between {start} and 32767"
    raise RuntimeError(msg)


def local_scaler(
    stack: StackState, deployment: str, plans: PolicyClient, config: ScalerConfig, connector: LocalEngineConnector
) -> ScalerService:
    return ScalerService(
        config=config,
        deployment=deployment,
        scaler_id="scaler-local",
        plans=plans,
        connectors={"short": connector},
        sink=KafkaActionSink(stack.kafka_bootstrap, timeout_s=10.0),
        metrics=ScalerMetrics(ServiceMetrics("scaler", deployment)),
        clock=lambda: NOW_S,
    )


def complete(url: str, max_tokens: int) -> dict[str, object]:
    """A completion of ``max_tokens`` tokens (EOS ignored) from a token-id prompt."""
    body = {"model": "tiny", "prompt": [5, 6, 7, 8, 9, 10], "max_tokens": max_tokens, "ignore_eos": True}
    request = urllib.request.Request(
        f"{url}/v1/completions", data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=300.0) as response:
        answer: dict[str, object] = json.loads(response.read())
        return answer


@pytest.mark.slow
def test_local_engines_follow_the_plan_drain_before_stopping_and_keep_the_bounds(
    stack: StackState, deployment: str, redis_client: redis.Redis, plans: PolicyClient, tmp_path: Path
) -> None:
    """Real vLLM CPU processes: started one step at a time, a busy one drained, the minimum kept, a pin held.

    The plan wants 2 replicas of an empty pool: the first pass starts one (the step limit), the second
    another, each counted once its /health answers. A request of 480 tokens runs on the newest when the
    plan drops to 0 GPUs: the pool goes to its minimum of 1, the newest replica leaves only once the
    request has finished (whole), and no later pass goes below 1. A scaler with the pool pinned at 1
    then holds it there against a plan for 2.
    """
    pytest.importorskip("vllm", reason="vLLM is not installed: bash ops/install.sh --dev --vllm")
    config = local_config(stack, deployment, tmp_path)
    assert config.pools["short"].local is not None
    connector = LocalEngineConnector("short", config.pools["short"].local)
    service = local_scaler(stack, deployment, plans, config, connector)
    pinned_service = None
    try:
        assert connector.replicas() == 0
        put_plan(redis_client, deployment, short_gpus=2, long_gpus=1, version=1)
        plans.refresh()
        first = service.step()
        assert [(a.from_replicas, a.to_replicas, a.reason, a.result) for a in first] == [
            (0, 1, "out_of_bounds", "applied")
        ]
        assert connector.replicas() == 1
        second = service.step()
        assert [(a.from_replicas, a.to_replicas, a.reason, a.result) for a in second] == [(1, 2, "scale_up", "applied")]
        oldest, newest = connector.urls()
        assert all(healthy(url, 5.0) for url in (oldest, newest))

        answers: list[dict[str, object]] = []
        request = threading.Thread(target=lambda: answers.append(complete(newest, LONG_REQUEST_TOKENS)))
        request.start()
        wait_until(lambda: (engine_in_flight(newest, 2.0) or 0) >= 1, 60.0, "the long request on the newest replica")
        put_plan(redis_client, deployment, short_gpus=0, long_gpus=1, version=2)
        plans.refresh()
        down = service.step()
        request.join(timeout=300.0)
        assert [(a.from_replicas, a.to_replicas, a.reason, a.result, a.detail) for a in down] == [
            (2, 1, "scale_down", "applied", None)
        ]
        assert len(answers) == 1
        usage, choices = answers[0]["usage"], answers[0]["choices"]
        assert isinstance(usage, dict)
        assert isinstance(choices, list)
        assert (usage["completion_tokens"], choices[0]["finish_reason"]) == (LONG_REQUEST_TOKENS, "length")
        assert connector.forced_stops == 0
        assert connector.urls() == [oldest]
        assert not healthy(newest, 2.0)

        assert service.step() == []
        assert connector.replicas() == 1

        pinned = local_config(stack, deployment, tmp_path, pinned=1)
        pinned_service = local_scaler(stack, deployment, plans, pinned, connector)
        put_plan(redis_client, deployment, short_gpus=2, long_gpus=1, version=3)
        plans.refresh()
        assert pinned_service.step() == []
        assert connector.urls() == [oldest]
    finally:
        service.close()
        if pinned_service is not None:
            pinned_service.close()
    assert connector.replicas() == 0
    assert not healthy(oldest, 2.0)
    logged = read_actions(stack.kafka_bootstrap, deployment, timeout_s=10.0)
    assert [(a.from_replicas, a.to_replicas, a.plan_version, a.connector, a.target) for a in logged] == [
        (0, 1, 1, "local", "local/short"),
        (1, 2, 1, "local", "local/short"),
        (2, 1, 2, "local", "local/short"),
    ]


def test_advisory_local_pool_starts_nothing_and_records_every_action(
    stack: StackState, deployment: str, redis_client: redis.Redis, plans: PolicyClient, tmp_path: Path
) -> None:
    """Advisory mode over a local pool: the actions the pool would have taken are on the log; no process starts."""
    config = local_config(stack, deployment, tmp_path, mode="advisory")
    local = config.pools["short"].local
    assert local is not None
    connector = LocalEngineConnector("short", local)
    service = local_scaler(stack, deployment, plans, config, connector)
    try:
        put_plan(redis_client, deployment, short_gpus=2, long_gpus=1, version=1)
        plans.refresh()
        service.step()
        service.step()
        put_plan(redis_client, deployment, short_gpus=0, long_gpus=1, version=2)
        plans.refresh()
        service.step()
        service.step()
    finally:
        service.close()
    assert connector.replicas() == 0
    assert free(local.first_port)
    assert free(local.first_port + 1)
    assert not (tmp_path / "engines").exists()
    logged = read_actions(stack.kafka_bootstrap, deployment, timeout_s=10.0)
    assert [(a.from_replicas, a.to_replicas, a.reason, a.result, a.plan_version) for a in logged] == [
        (0, 1, "out_of_bounds", "advisory", 1),
        (1, 2, "scale_up", "advisory", 1),
        (2, 1, "scale_down", "advisory", 2),
    ]


@pytest.fixture
def gateway_url(stack: StackState, deployment: str, tmp_path: Path) -> Iterator[str]:
    """``governor gateway`` with no upstream of its own and an admin token, on a free loopback port."""
    (tmp_path / "gateway.toml").write_text("")
    port = free_port()
    argv = [sys.executable, "-m", "services.cli", "gateway", "--gateway-config", str(tmp_path / "gateway.toml")]
    argv += ["--gateway-host", "127.0.0.1", "--gateway-port", str(port), "--deployment", deployment]
    argv += ["--kafka-bootstrap", stack.kafka_bootstrap, "--redis-url", stack.redis_url]
    env = {**os.environ, "GOVERNOR_GATEWAY_ADMIN_TOKEN": ADMIN_TOKEN}
    with (tmp_path / "gateway.log").open("wb") as output:
        process = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: process.poll() is not None or healthy_gateway(url), 120.0, "the gateway's /healthz")
        assert process.poll() is None, (tmp_path / "gateway.log").read_text()[-3000:]
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


ADMIN_TOKEN = "scaler-test-admin-token"


def healthy_gateway(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=2.0) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def complete_through(gateway: str, max_tokens: int) -> dict[str, object]:
    """A completion through the gateway (a token-id prompt: the gateway counts it by its length), retried while
    no upstream is in rotation yet (503)."""
    body = {"model": "tiny", "prompt": [5, 6, 7, 8, 9, 10], "max_tokens": max_tokens, "ignore_eos": True}
    deadline = time.monotonic() + 120.0
    while True:
        request = urllib.request.Request(
            f"{gateway}/v1/completions", data=json.dumps(body).encode(), headers={"content-type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=300.0) as response:
                answer: dict[str, object] = json.loads(response.read())
                return answer
        except urllib.error.HTTPError as exc:
            if exc.code != 503 or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


@pytest.mark.slow
def test_local_engines_join_the_real_gateway_and_leave_it_drained(
    stack: StackState,
    deployment: str,
    redis_client: redis.Redis,
    *,
    plans: PolicyClient,
    gateway_url: str,
    tmp_path: Path,
) -> None:
    """A replica the plan asks for joins the gateway's pool; when the plan drops it, a request the gateway has
    in flight on it finishes whole before the replica stops, and the gateway forgets it."""
    pytest.importorskip("vllm", reason="vLLM is not installed: bash ops/install.sh --dev --vllm")
    token_file = tmp_path / "admin.token"
    token_file.write_text(ADMIN_TOKEN)
    base = local_config(stack, deployment, tmp_path).model_dump()
    short = base["pools"]["short"]
    short.update(min_replicas=0, max_replicas=1)
    short["local"]["model"] = "tiny"
    base["gateway"] = {"url": gateway_url, "token_file": str(token_file)}
    config = ScalerConfig.model_validate(base)
    admin = gateway_admin(config)
    assert admin is not None
    local = config.pools["short"].local
    assert local is not None
    connector = LocalEngineConnector("short", local, gateway=admin)
    service = local_scaler(stack, deployment, plans, config, connector)
    try:
        put_plan(redis_client, deployment, short_gpus=1, long_gpus=1, version=1)
        plans.refresh()
        assert [(a.from_replicas, a.to_replicas, a.result) for a in service.step()] == [(0, 1, "applied")]
        (url,) = connector.urls()
        assert [(u.url, u.pool, u.state) for u in admin.upstreams()] == [(url, "short", "active")]

        answers: list[dict[str, object]] = []
        request = threading.Thread(target=lambda: answers.append(complete_through(gateway_url, LONG_REQUEST_TOKENS)))
        request.start()
        wait_until(lambda: (admin.in_flight(url) or 0) >= 1, 150.0, "the request in flight at the gateway")
        put_plan(redis_client, deployment, short_gpus=0, long_gpus=1, version=2)
        plans.refresh()
        down = service.step()
        request.join(timeout=300.0)
        assert [(a.from_replicas, a.to_replicas, a.reason, a.result, a.detail) for a in down] == [
            (1, 0, "scale_down", "applied", None)
        ]
        assert len(answers) == 1
        usage = answers[0]["usage"]
        assert isinstance(usage, dict)
        assert usage["completion_tokens"] == LONG_REQUEST_TOKENS
        assert admin.upstreams() == []
        assert connector.replicas() == 0
        assert not healthy(url, 2.0)
    finally:
        service.close()
