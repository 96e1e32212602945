"""The EB(k)/EB+ simulator schedulers: the EB cycle by hand, exclusive pricing, MB fallback, engine limits."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.errors import InvalidInputError
from schemas.events import Event
from schemas.policy_docs.base import InputsDigest
from schemas.policy_docs.ebplus import EbplusFallback, EbplusMode, EbplusPayload, EbplusPolicy, EbplusState, KvGate
from schemas.requests import RequestFinished
from schemas.steps import StepReport
from services.sdk.protocol import ListSink, StaticPolicySource
from services.sim.engine import EngineConfig, SimEngine
from services.sim.request import RequestSpec
from services.sim.routing import LeastLoadedRouter
from services.sim.run_summary import MetricsRecorder
from services.sim.schedulers.ebplus import EbplusScheduler, FixedEbScheduler
from services.sim.simulation import Simulation
from services.sim.telemetry import EngineTelemetry
from services.sim.timing import EbTiming

# Exclusive costs small, mixed steps dear (>= 0.1 s per token), so the pricing shows in every duration.
TIMING = EbTiming(
    alpha_p_s=0.01,
    beta_p_s_per_token=0.001,
    alpha_d_s=0.005,
    beta_d_s_per_seq=0.001,
    alpha_mb_s=0.0,
    c0_s_per_token=0.1,
    c1_s_per_token=0.1,
    c2_s_per_token=0.0,
)
OUTPUTS = (2, 2, 5, 5, 3, 3)


def _requests(outputs: tuple[int, ...] = OUTPUTS, prompt: int = 8) -> list[RequestSpec]:
    return [
        RequestSpec(request_id=f"r{i}", arrival_s=0.0, prompt_tokens=prompt, output_tokens=o)
        for i, o in enumerate(outputs)
    ]


def _policy(
    mode: EbplusMode = "EB",
    *,
    n: int = 4,
    theta: float = 0.5,
    valid_until: float = 100.0,
    mb_budget_tokens: int | None = None,
) -> EbplusPolicy:
    payload = EbplusPayload(
        mode=mode,
        theta=theta,
        k=max(1, int(theta * n)),
        n=n,
        kv_gate=KvGate(),
        mu_l_tokens=8.0,
        mu_o_tokens=3.0,
        calib_id="test",
        fallback=EbplusFallback(n=n),
        mb_token_budget_tokens=mb_budget_tokens,
    )
    return EbplusPolicy(
        scope="e0",
        deployment="test",
        version=1,
        computed_at=0.0,
        valid_until=valid_until,
        inputs=InputsDigest(snapshot_id="s"),
        payload=payload,
        state=EbplusState(mode=mode),
    )


def _run(
    scheduler: EbplusScheduler | FixedEbScheduler,
    requests: list[RequestSpec],
    *,
    config: EngineConfig | None = None,
    source: StaticPolicySource | None = None,
    until_s: float = 100.0,
) -> tuple[list[Event], MetricsRecorder]:
    sink = ListSink()
    metrics = MetricsRecorder()
    engine = SimEngine(
        config or EngineConfig(engine_id="e0", max_num_seqs=4),
        scheduler=scheduler,
        timing=TIMING,
        telemetry=EngineTelemetry(engine_id="e0", deployment="test", sink=sink),
        policy_source=source or StaticPolicySource(),
        metrics=metrics,
    )
    Simulation(engines=[engine], router=LeastLoadedRouter(), requests=requests, metrics=metrics).run(until_s)
    return sink.events, metrics


def _steps(events: list[Event]) -> list[StepReport]:
    return [e for e in events if isinstance(e, StepReport)]


# EB(k = 2, N = 4) on six requests of 8 prompt tokens, outputs 2, 2, 5, 5, 3, 3 (worked by hand). The
# engine starts stepping at the first arrival, so phase 0 prefills r0 alone, then r1-r3 (24 tokens) |
# decode 4 (r0, r1 done: k = 2 idle) | refill r4, r5 (16 tokens) | decode 4 | decode 4 (r4, r5 done) |
# decode 2 (r2, r3 done). Prefill costs alpha_p + beta_p tokens, decode alpha_d + beta_d n.
CYCLE_KINDS = ["prefill", "prefill", "decode", "prefill", "decode", "decode", "decode"]
CYCLE_DURATIONS_S = [0.018, 0.034, 0.009, 0.026, 0.009, 0.009, 0.007]


class TestEbCycle:
    def test_fixed_eb_runs_the_k_threshold_cycle_priced_exclusively(self) -> None:
        scheduler = FixedEbScheduler(theta=0.5, n_seqs=4, mu_l_tokens=8.0, mu_o_tokens=3.0)
        events, _ = _run(scheduler, _requests())
        steps = _steps(events)
        assert [s.batch_kind for s in steps] == CYCLE_KINDS
        assert [round(s.duration_s, 9) for s in steps] == CYCLE_DURATIONS_S
        assert {s.scheduler_mode for s in steps} == {"EB"}
        assert sum(isinstance(e, RequestFinished) for e in events) == 6

    def test_ebplus_under_a_pushed_eb_document_runs_the_same_cycle(self) -> None:
        scheduler = EbplusScheduler()
        events, _ = _run(scheduler, _requests(), source=StaticPolicySource([_policy()]))
        steps = _steps(events)
        assert [s.batch_kind for s in steps] == CYCLE_KINDS
        assert [round(s.duration_s, 9) for s in steps] == CYCLE_DURATIONS_S
        assert (scheduler.eb_steps, scheduler.fallback_steps) == (7, 0)

    def test_pushed_n_caps_the_batch_below_max_num_seqs(self) -> None:
        """N = 2 on an engine of 4 slots: phase 0 fills two slots (r0, then r1), then decodes."""
        scheduler = EbplusScheduler()
        config = EngineConfig(engine_id="e0", max_num_seqs=4)
        events, _ = _run(scheduler, _requests(), config=config, source=StaticPolicySource([_policy(n=2)]))
        steps = _steps(events)
        assert [(s.batch_kind, s.num_prefill_requests, s.num_decode_requests) for s in steps[:3]] == [
            ("prefill", 1, 0),
            ("prefill", 1, 0),
            ("decode", 0, 2),
        ]


class TestFallback:
    def test_missing_policy_runs_mixed_batching(self) -> None:
        scheduler = EbplusScheduler()
        events, _ = _run(scheduler, _requests())
        steps = _steps(events)
        assert {s.scheduler_mode for s in steps} == {"MB"}
        # The first step prefills r0's 8 prompt tokens (r = 0): mixed price 0.1 * 8.
        assert steps[0].duration_s == pytest.approx(0.8)
        assert scheduler.fallback_steps == len(steps)
        assert scheduler.eb_steps == 0

    def test_pushed_mb_mode_runs_mixed_batching_without_fallback(self) -> None:
        scheduler = EbplusScheduler()
        events, _ = _run(scheduler, _requests(), source=StaticPolicySource([_policy("MB")]))
        assert {s.scheduler_mode for s in _steps(events)} == {"MB"}
        assert scheduler.fallback_steps == 0

    def test_pushed_mb_budget_bounds_every_mixed_step(self) -> None:
        """A 6-token budget: r0's 8-token prompt takes two chunks, and no step computes more than 6 tokens."""
        scheduler = EbplusScheduler()
        source = StaticPolicySource([_policy("MB", mb_budget_tokens=6)])
        events, _ = _run(scheduler, _requests(), source=source)
        steps = _steps(events)
        assert max(s.sum_prefill_tokens + s.num_decode_requests for s in steps) == 6
        assert (steps[0].sum_prefill_tokens, steps[1].sum_prefill_tokens) == (6, 6)
        assert sum(isinstance(e, RequestFinished) for e in events) == 6
        unbounded, _ = _run(EbplusScheduler(), _requests(), source=StaticPolicySource([_policy("MB")]))
        assert max(s.sum_prefill_tokens for s in _steps(unbounded)) > 6

    def test_stale_policy_falls_back_to_mixed_batching_after_valid_until(self) -> None:
        """Valid until 0.05 s: the EB steps run first, every step starting later is mixed."""
        scheduler = EbplusScheduler()
        events, _ = _run(scheduler, _requests(), source=StaticPolicySource([_policy(valid_until=0.05)]))
        steps = _steps(events)
        starts = [s.ts - s.duration_s for s in steps]
        modes = [s.scheduler_mode for s in steps]
        assert modes == ["EB" if start <= 0.05 else "MB" for start in starts]
        assert modes[0] == "EB"
        assert modes[-1] == "MB"


class TestLimits:
    def test_fixed_eb_refuses_theta_outside_the_unit_interval(self) -> None:
        with pytest.raises(InvalidInputError, match="theta"):
            FixedEbScheduler(theta=1.0, n_seqs=4, mu_l_tokens=8.0, mu_o_tokens=3.0)

    @settings(max_examples=25)
    @given(
        outputs=st.lists(st.integers(min_value=1, max_value=60), min_size=1, max_size=30),
        prompt=st.integers(min_value=1, max_value=200),
        theta=st.floats(min_value=0.05, max_value=0.95),
        kv_blocks=st.integers(min_value=20, max_value=200),
    )
    def test_every_request_finishes_within_the_engine_limits(
        self, outputs: list[int], prompt: int, theta: float, kv_blocks: int
    ) -> None:
        """A tight KV cache and budget: the engine accepts every plan (it raises otherwise) and all finish."""
        config = EngineConfig(engine_id="e0", max_num_seqs=8, token_budget_tokens=64, kv_blocks_total=kv_blocks)
        scheduler = FixedEbScheduler(theta=theta, n_seqs=8, mu_l_tokens=float(prompt), mu_o_tokens=30.0)
        events, metrics = _run(scheduler, _requests(tuple(outputs), prompt), config=config, until_s=10_000.0)
        finished = [e for e in events if isinstance(e, RequestFinished)]
        assert len(finished) == len(outputs)
        assert len(metrics.rejections) == sum(1 for e in finished if e.finish_reason == "error")
