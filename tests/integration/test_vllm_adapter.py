"""The vLLM adapter against real vLLM (CPU build, a tiny random Llama), the real broker and the real Redis.

The engines run in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) so that a test can read the
scheduler's own bookkeeping; the stat-logger plugin is loaded through vLLM's own entry-point loader.
Prompts are random token ids; outputs stop at a set of stop tokens (a ``stop`` finish) or at
``max_tokens`` (a ``length`` finish, right-censored).

The scheduler tests run twice, with vLLM's async scheduling off and on (the ``scheduling`` fixture).
The CPU build forces it off in its platform hook (``CpuPlatform.check_and_update_config`` sets
``scheduler_config.async_scheduling = False``; vLLM calls the hook last when it builds its config),
so for ``async`` the fixture wraps that hook, in this test process only, to set it back on: the
engine core then keeps two batches in flight (its batch queue) and schedules batch N+1 before batch
N's output is applied, as on a GPU, and Governor's classes build their ``AsyncScheduler`` twins.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from decide.specs import default_registry
from decide.wiring.admission import ADMISSION_INTERVAL_S
from schemas.engines import EngineRegistered
from schemas.events import Event, parse_event
from schemas.names import TELEMETRY_TOPIC, estimate_key
from schemas.policy_docs.base import InputsDigest
from schemas.policy_docs.ebplus import EbplusMode
from schemas.policy_docs.slai import SlaiPayload, SlaiPolicy, SlaiState
from schemas.requests import RequestFinished
from schemas.steps import StepReport
from services.cli.main import main as governor
from services.policy.service import PolicyService
from services.replay.replay import read_topic
from services.stack.launcher import StackState
from services.stack.processes import free_port
from services.store.redis_store import RedisStore
from services.stream.processor import StreamProcessor

# torch and vLLM warn about their own deprecations at import and run time; they are not ours to fix.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    vllm = pytest.importorskip("vllm", reason="vLLM is not installed: bash ops/install.sh --dev --vllm")
    from vllm import SamplingParams
    from vllm.platforms import current_platform
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.engine.llm_engine import LLMEngine
    from vllm.v1.metrics.loggers import load_stat_logger_plugin_factories

    from services.engines.vllm.drive import STOP_TOKENS, build_engine, pinned_ebplus
    from services.engines.vllm.scheduler import GovernorScheduler
    from services.engines.vllm.stat_logger import GovernorStatLogger

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]

SCHEDULERS = "services.engines.vllm.scheduler"
MB_STEP_BUDGET_TOKENS = 64  # 16 slots' decodes and 48 prefill tokens: under the engine's own 512, above its slots
_ENGINES: list[Any] = []  # engines a test started, shut down (their Governor links closed) at its teardown


def _engine(scheduler_cls: str | None, *, plugin: bool = False) -> LLMEngine:
    engine = build_engine(
        scheduler_cls,
        stat_loggers=load_stat_logger_plugin_factories() if plugin else None,
        iteration_details=plugin,
        max_num_batched_tokens=512,
    )
    _ENGINES.append(engine)
    return engine


def _step_tokens(step: StepReport) -> int:
    """The tokens one step carried: its prefill chunks and one per decode."""
    return step.sum_prefill_tokens + step.num_decode_requests


def _serve(engine: LLMEngine, count: int, *, prefix: str, max_tokens: int = 48, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    for index in range(count):
        prompt = rng.integers(100, 1000, size=int(rng.integers(16, 96))).tolist()
        params = SamplingParams(
            max_tokens=max_tokens,
            ignore_eos=True,
            detokenize=False,
            stop_token_ids=STOP_TOKENS,
        )
        engine.add_request(f"{prefix}-{index}", {"prompt_token_ids": prompt}, params)
    deadline = time.monotonic() + 300.0
    while engine.has_unfinished_requests() and time.monotonic() < deadline:
        engine.step()
    assert not engine.has_unfinished_requests()


def _scheduler(engine: LLMEngine) -> Any:
    return engine.engine_core.engine_core.scheduler


def _events(stack: StackState, deployment: str) -> list[Event]:
    found = []
    # The shared topic also holds other tests' records (read_topic leaves out tombstones).
    for value in read_topic(stack.kafka_bootstrap, TELEMETRY_TOPIC):
        if json.loads(value).get("deployment") == deployment:
            found.append(parse_event(value))
    return found


def _fold(stack: StackState, deployment: str) -> StreamProcessor:
    store = RedisStore.from_url(stack.redis_url, deployment, 5.0)
    processor = StreamProcessor(
        deployment=deployment, bootstrap=stack.kafka_bootstrap, store=store, registry=default_registry()
    )
    processor.run(idle_exit_s=4.0)
    processor.close()
    return processor


def _slai(deployment: str, engine_id: str, version: int, delta: float) -> SlaiPolicy:
    now = time.time()
    return SlaiPolicy(
        scope=engine_id,
        deployment=deployment,
        version=version,
        computed_at=now - 1.0,
        valid_until=now + 600.0,
        inputs=InputsDigest(snapshot_id="test"),
        payload=SlaiPayload(
            mode="fixed",
            delta_fixed=delta,
            delta_lo=delta,
            delta_hi=delta,
            kv_threshold_frac=0.96,
            tier_tbt_s={"default": 2.0},
            default_tbt_s=2.0,
            token_budget_tokens=256,
            max_active=16,
            max_decodes=16,
            prefill_order="spf",
        ),
        state=SlaiState(),
    )


@pytest.fixture(autouse=True)
def _shut_down_engines() -> Iterator[None]:
    """Shut down every engine a test started: its Governor link closes, so no publisher thread outlives it.

    A link left open keeps heartbeating to a broker that may be gone, and kafka-python's reconnect
    back-off draws from ``random`` in that thread while later tests run (Hypothesis reports that).
    """
    yield
    for engine in _ENGINES:
        engine.engine_core.shutdown()
    _ENGINES.clear()


@pytest.fixture
def governed(stack: StackState, deployment: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[RedisStore]:
    """The engine's Governor environment for ``deployment``, and a store of its keys."""
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    monkeypatch.setenv("GOVERNOR_DEPLOYMENT", deployment)
    monkeypatch.setenv("GOVERNOR_KAFKA_BOOTSTRAP", stack.kafka_bootstrap)
    monkeypatch.setenv("REDIS_URL", stack.redis_url)
    monkeypatch.setenv("GOVERNOR_POLICY_POLL_S", "0.05")
    store = RedisStore.from_url(stack.redis_url, deployment, 5.0)
    yield store
    store.close()


@pytest.fixture(params=["sync", "async"])
def scheduling(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """vLLM's async scheduling off (the CPU build's own choice) or on (its default on GPUs), for engines built next.

    ``async`` wraps the CPU platform's config hook so that, after it turns async scheduling off, the
    engine's config says on again; monkeypatch restores the hook after the test.
    """
    if request.param == "async":
        platform = type(current_platform)
        hook = platform.check_and_update_config

        def force_async(vllm_config: Any) -> None:
            hook(vllm_config)
            vllm_config.scheduler_config.async_scheduling = True

        monkeypatch.setattr(platform, "check_and_update_config", staticmethod(force_async))
    return str(request.param)


def _check_scheduling(engine: LLMEngine, scheduling: str) -> None:
    """The engine runs the mode asked for, with Governor's matching class."""
    core = engine.engine_core.engine_core
    runs_async = scheduling == "async"
    assert core.async_scheduling is runs_async
    assert core.batch_queue_size == (2 if runs_async else 1)
    assert isinstance(core.scheduler, GovernorScheduler)
    assert isinstance(core.scheduler, AsyncScheduler) is runs_async


def _await_ack(engine: LLMEngine, kind: str, version: int) -> None:
    link = _scheduler(engine).link
    deadline = time.monotonic() + 10.0
    while link.stream.policy_versions.get(kind) != version and time.monotonic() < deadline:
        link.document(kind, time.time())
        time.sleep(0.05)
    assert link.stream.policy_versions.get(kind) == version


def test_the_plugin_is_registered_for_vllms_own_loader() -> None:
    assert GovernorStatLogger in load_stat_logger_plugin_factories()


def test_stock_engine_with_the_plugin_feeds_estimates_with_censored_length_finishes(
    stack: StackState, deployment: str, governed: RedisStore, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("GOVERNOR_ENGINE_ID", "vllm-stock")
    monkeypatch.setenv("GOVERNOR_ENDPOINT_URL", "http://127.0.0.1:8001")
    monkeypatch.setenv("GOVERNOR_DP_GROUP", "dp-stock")
    monkeypatch.setenv("GOVERNOR_DP_RANK", "1")
    engine = _engine(None, plugin=True)
    _serve(engine, 32, prefix="p", max_tokens=24)
    time.sleep(ADMISSION_INTERVAL_S + 0.5)  # the second wave's events are past the admission trigger
    _serve(engine, 32, prefix="q", max_tokens=24, seed=1)
    plugin = _plugin(engine)
    assert plugin.link is not None
    plugin.link.close(30.0)
    assert plugin.link.publisher.stats().dropped == 0
    events = _events(stack, deployment)
    path = tmp_path / "vllm-events.jsonl"
    path.write_text("".join(event.model_dump_json() + "\n" for event in events))
    assert governor(["schema", "check", str(path)]) == 0
    finished = [e for e in events if isinstance(e, RequestFinished)]
    steps = [e for e in events if isinstance(e, StepReport)]
    assert len(finished) == 64
    assert {e.event_type for e in events} >= {"engine.registered", "request.arrived", "request.finished", "step"}
    (registered,) = [e for e in events if isinstance(e, EngineRegistered)]
    gateway_fields = (registered.endpoint_url, registered.dp_group, registered.dp_rank)
    assert gateway_fields == ("http://127.0.0.1:8001", "dp-stock", 1)
    assert all(e.dp_rank == 1 for e in events), "the rank is stamped on every event of the engine"
    censored = sum(1 for e in finished if e.finish_reason == "length")
    assert 0 < censored < 64
    assert all(e.output_tokens == 24 for e in finished if e.finish_reason == "length")
    assert sum(s.sum_prefill_tokens for s in steps) >= sum(e.prompt_tokens for e in finished)
    processor = _fold(stack, deployment)
    assert processor.counters.folded == len(events)
    summary = json.loads(governed._client.get(estimate_key(deployment, "vllm-stock", "summary")))
    assert summary["completions_total"] == 64
    assert summary["hazard"]["n_censored"] == censored
    assert summary["engine"]["obeys"] == []
    service = PolicyService(
        deployment=deployment, bootstrap=stack.kafka_bootstrap, store=governed, registry=default_registry()
    )
    service.run(idle_exit_s=4.0)
    service.close()
    assert governed.get_policy("admission", "vllm-stock") is not None, "decided from the plugin's telemetry"
    assert governed.get_policy("ebplus", "vllm-stock") is None, "a stock engine is sent no EB+ document"
    assert governed.get_policy("bfio", "dp-stock") is not None, "its DP group's bundle, for the gateway"
    assert governed.get_policy("bfio", "vllm-stock") is None, "a rank gets no bundle of its own"


def _plugin(engine: LLMEngine) -> GovernorStatLogger:
    """The plugin instance vLLM made for engine 0 (wrapped in its per-engine adapter)."""
    manager = engine.logger_manager
    assert manager is not None
    for adapter in manager.stat_loggers:
        for logger in getattr(adapter, "per_engine_stat_loggers", {}).values():
            if isinstance(logger, GovernorStatLogger):
                return logger
    raise AssertionError("vLLM did not load the Governor stat logger")


def test_step_telemetry_carries_exactly_the_batches_vllm_ran(
    stack: StackState, deployment: str, governed: RedisStore, monkeypatch: pytest.MonkeyPatch, scheduling: str
) -> None:
    """One step event per batch vLLM executed, in order, with its tokens; finishes carry vLLM's generated tokens.

    The batches are what the engine core handed its executor (``execute_model``); under async scheduling two
    are in flight, and the counts of each are the ones reported for it.
    """
    monkeypatch.setenv("GOVERNOR_ENGINE_ID", "vllm-exact")
    engine = _engine(f"{SCHEDULERS}.GovernorScheduler")
    _check_scheduling(engine, scheduling)
    core = engine.engine_core.engine_core
    scheduler = _scheduler(engine)
    executed: list[int] = []
    most_in_flight = 0
    execute_model = core.model_executor.execute_model

    def counted(scheduler_output: Any, non_block: bool = False) -> Any:
        nonlocal most_in_flight
        if scheduler_output.total_num_scheduled_tokens > 0:
            executed.append(scheduler_output.total_num_scheduled_tokens)
            most_in_flight = max(most_in_flight, scheduler.batches_in_flight())
        return execute_model(scheduler_output, non_block=non_block)

    monkeypatch.setattr(core.model_executor, "execute_model", counted)
    rng = np.random.default_rng(3)
    requests, max_tokens = 24, 32
    for index in range(requests):
        prompt = rng.integers(100, 1000, size=int(rng.integers(16, 300))).tolist()
        params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, detokenize=False)
        engine.add_request(f"x-{index}", {"prompt_token_ids": prompt}, params)
    generated = 0
    while engine.has_unfinished_requests():
        generated += sum(len(output.outputs[0].token_ids) for output in engine.step() if output.finished)
    assert scheduler.link.publisher.flush(30.0)

    events = _events(stack, deployment)
    steps = sorted((e for e in events if isinstance(e, StepReport)), key=lambda step: step.step_id)
    finished = [e for e in events if isinstance(e, RequestFinished)]
    assert generated == requests * max_tokens
    assert most_in_flight == (2 if scheduling == "async" else 1)
    assert [_step_tokens(step) for step in steps] == executed, "each batch's tokens, in the order vLLM ran them"
    assert sum(e.output_tokens for e in finished) == generated
    assert sum(step.num_prefill_requests for step in steps) >= requests
    # A request's first token comes from its last prompt chunk, every later one from one decode.
    assert sum(step.num_decode_requests for step in steps) == generated - requests
    assert scheduler.batches_in_flight() == 0


def test_ebplus_scheduler_feeds_a_decision_and_obeys_eb_then_mb_then_falls_back(
    stack: StackState, deployment: str, governed: RedisStore, monkeypatch: pytest.MonkeyPatch, scheduling: str
) -> None:
    monkeypatch.setenv("GOVERNOR_ENGINE_ID", "vllm-eb")
    engine = _engine(f"{SCHEDULERS}.EbplusScheduler")
    _check_scheduling(engine, scheduling)
    scheduler = _scheduler(engine)
    _serve(engine, 110, prefix="warm", seed=1)
    assert scheduler.link.publisher.flush(30.0)
    _fold(stack, deployment)
    service = PolicyService(
        deployment=deployment, bootstrap=stack.kafka_bootstrap, store=governed, registry=default_registry()
    )
    service.run(idle_exit_s=4.0)
    decided = governed.get_policy("ebplus", "vllm-eb")
    assert decided is not None, "the policy service decided EB+ from the engine's own telemetry"

    for version, mode, budget in (
        (100, EbplusMode.EB, None),
        (101, EbplusMode.MB, None),
        (102, EbplusMode.MB, MB_STEP_BUDGET_TOKENS),
    ):
        document = pinned_ebplus(deployment, "vllm-eb", version, mode, now_s=time.time(), mb_token_budget_tokens=budget)
        assert governed.put_policy("ebplus", "vllm-eb", version, document.model_dump_json())
        _await_ack(engine, "ebplus", version)
        _serve(engine, 48, prefix=f"{mode}-{version}", seed=version)
    stale = pinned_ebplus(deployment, "vllm-eb", 103, EbplusMode.EB, now_s=time.time(), valid_for_s=0.5)
    assert governed.put_policy("ebplus", "vllm-eb", 103, stale.model_dump_json())
    _await_ack(engine, "ebplus", 103)
    time.sleep(1.0)
    _serve(engine, 48, prefix="stale", seed=7)
    assert scheduler.link.publisher.flush(30.0)

    steps = [e for e in _events(stack, deployment) if isinstance(e, StepReport)]
    by_version: dict[int, list[StepReport]] = {}
    for step in steps:
        by_version.setdefault(step.policy_versions.get("ebplus", 0), []).append(step)
    eb = [s for s in by_version[100] if s.scheduler_mode == EbplusMode.EB]
    assert len(eb) > 20
    assert all(s.batch_kind in ("prefill", "decode") for s in eb), "EB runs exclusive prefill and decode batches"
    assert {s.batch_kind for s in eb} == {"prefill", "decode"}
    mb = [s for s in by_version[101] if s.scheduler_mode == EbplusMode.MB]
    assert any(s.batch_kind == "mixed" for s in mb), "MB mixes prefills into decode batches"
    assert max(_step_tokens(s) for s in mb) > MB_STEP_BUDGET_TOKENS, "without a budget a step takes in more"
    bounded = [s for s in by_version[102] if s.scheduler_mode == EbplusMode.MB]
    assert any(s.batch_kind == "mixed" for s in bounded)
    assert max(_step_tokens(s) for s in bounded) <= MB_STEP_BUDGET_TOKENS, "MB steps keep to the document's budget"
    stale_steps = by_version[103]
    assert stale_steps[-1].scheduler_mode == "stock"
    assert any(s.batch_kind == "mixed" for s in stale_steps if s.scheduler_mode == "stock")
    acks = [e for e in _events(stack, deployment) if e.event_type == "policy.applied"]
    assert [a.version for a in acks if a.kind == "ebplus"][-4:] == [100, 101, 102, 103]  # type: ignore[attr-defined]
    service.close()


def test_slai_scheduler_sets_decode_deadlines_from_the_pushed_offset(
    stack: StackState, deployment: str, governed: RedisStore, monkeypatch: pytest.MonkeyPatch, scheduling: str
) -> None:
    monkeypatch.setenv("GOVERNOR_ENGINE_ID", "vllm-slai")
    engine = _engine(f"{SCHEDULERS}.SlaiScheduler")
    _check_scheduling(engine, scheduling)
    scheduler = _scheduler(engine)
    for version, delta in ((1, 0.5), (2, 4.0)):
        document = _slai(deployment, "vllm-slai", version, delta)
        assert governed.put_policy("slai", "vllm-slai", version, document.model_dump_json())
        _await_ack(engine, "slai", version)
        seen: list[tuple[float, float, float]] = []
        rng = np.random.default_rng(version)
        for index in range(32):
            prompt = rng.integers(100, 1000, size=int(rng.integers(16, 96))).tolist()
            params = SamplingParams(max_tokens=48, ignore_eos=True, detokenize=False)
            engine.add_request(f"s{version}-{index}", {"prompt_token_ids": prompt}, params)
        deferred_before = scheduler.deferred_decodes
        while engine.has_unfinished_requests():
            engine.step()
            for request_id, deadline in scheduler.deadlines_s.items():
                window = deadline - scheduler.batch_end_s[request_id]
                seen.append((window, scheduler.offsets[request_id], scheduler.tbars_s[request_id]))
        assert seen
        assert all(offset == delta for _, offset, _ in seen)
        # C - e = TBT - delta tbar (eq. 8); 1e-6 s is the rounding of epoch-sized times (about 2e9 s) in doubles.
        assert all(window == pytest.approx(2.0 - delta * tbar, abs=1e-6) for window, _, tbar in seen)
        if delta == 0.5:
            assert scheduler.deferred_decodes > deferred_before, "non-critical decodes wait while prompts are queued"
    assert scheduler.scheduler_mode == "slai"


def test_engine_keeps_serving_stock_when_the_control_plane_is_unreachable(
    deployment: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    monkeypatch.setenv("GOVERNOR_ENGINE_ID", "vllm-alone")
    monkeypatch.setenv("GOVERNOR_DEPLOYMENT", deployment)
    monkeypatch.setenv("GOVERNOR_KAFKA_BOOTSTRAP", f"127.0.0.1:{free_port()}")
    monkeypatch.setenv("REDIS_URL", f"redis://127.0.0.1:{free_port()}/0")
    engine = _engine(f"{SCHEDULERS}.EbplusScheduler")
    _serve(engine, 32, prefix="alone")
    scheduler = _scheduler(engine)
    assert scheduler.scheduler_mode == "stock"
    assert scheduler.link.policies.stats().backend_errors > 0
