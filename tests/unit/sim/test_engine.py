"""The single engine: hand-computed timings, conservation, policies, determinism, the MB formula."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.engines import PolicyApplied
from schemas.events import Event
from schemas.policy_docs.admission import AdmissionPayload, AdmissionPolicy, AdmissionState
from schemas.policy_docs.base import InputsDigest
from schemas.requests import RequestArrived, RequestFinished, RequestFirstToken, RequestPreempted
from schemas.steps import StepReport
from services.sdk.protocol import ListSink, StaticPolicySource
from services.sim.engine import EngineConfig, SimEngine
from services.sim.request import RequestSpec
from services.sim.routing import LeastLoadedRouter
from services.sim.run_summary import MetricsRecorder
from services.sim.schedulers.base import BatchPlan, EngineView
from services.sim.schedulers.baselines import MixedChunkedScheduler, SarathiServeScheduler
from services.sim.simulation import Simulation
from services.sim.telemetry import EngineTelemetry
from services.sim.timing import EbTiming
from services.sim.workload import GeometricLengths, PoissonArrivals, Workload, WorkloadPhase

HAND = EbTiming(
    alpha_p_s=0.0,
    beta_p_s_per_token=0.0,
    alpha_d_s=0.0,
    beta_d_s_per_seq=0.0,
    alpha_mb_s=0.002,
    c0_s_per_token=0.001,
    c1_s_per_token=0.002,
    c2_s_per_token=0.0,
)
FAST = EbTiming(
    alpha_p_s=0.0,
    beta_p_s_per_token=0.0,
    alpha_d_s=0.0,
    beta_d_s_per_seq=0.0,
    alpha_mb_s=0.002,
    c0_s_per_token=2e-5,
    c1_s_per_token=4e-5,
    c2_s_per_token=0.0,
)


def _run(
    requests: list[RequestSpec],
    *,
    config: EngineConfig,
    scheduler: MixedChunkedScheduler | SarathiServeScheduler | _PolicyScheduler | None = None,
    timing: EbTiming = HAND,
    until_s: float = 100.0,
    source: StaticPolicySource | None = None,
) -> tuple[list[Event], MetricsRecorder]:
    sink = ListSink()
    metrics = MetricsRecorder()
    engine = SimEngine(
        config,
        scheduler=scheduler or MixedChunkedScheduler(),
        timing=timing,
        telemetry=EngineTelemetry(engine_id=config.engine_id, deployment="test", sink=sink),
        policy_source=source or StaticPolicySource(),
        metrics=metrics,
    )
    simulation = Simulation(engines=[engine], router=LeastLoadedRouter(), requests=requests, metrics=metrics)
    simulation.run(until_s)
    return sink.events, metrics


def _spec(request_id: str, arrival_s: float, prompt: int, output: int, **extra: object) -> RequestSpec:
    return RequestSpec(request_id=request_id, arrival_s=arrival_s, prompt_tokens=prompt, output_tokens=output, **extra)  # type: ignore[arg-type]


class TestKnownAnswers:
    def test_one_request_times_follow_the_mixed_formula_by_hand(self) -> None:
        """Prefill of 4 tokens (r = 0): 0.002 + 0.001 * 4 = 6 ms; each decode (r = 1): 0.002 + 0.003 = 5 ms."""
        events, _ = _run([_spec("a", 0.0, 4, 3)], config=EngineConfig(engine_id="e0"))
        steps = [e for e in events if isinstance(e, StepReport)]
        assert [round(s.duration_s, 9) for s in steps] == [0.006, 0.005, 0.005]
        assert [s.batch_kind for s in steps] == ["prefill", "decode", "decode"]
        first = next(e for e in events if isinstance(e, RequestFirstToken))
        finished = next(e for e in events if isinstance(e, RequestFinished))
        assert first.ttft_s == pytest.approx(0.006)
        assert finished.ts == pytest.approx(0.016)
        assert finished.tbt_gaps == 2
        assert finished.tbt_mean_s == pytest.approx(0.005)
        assert finished.output_tokens == 3
        assert finished.finish_reason == "stop"

    def test_chunked_prefill_under_a_small_budget_then_mixed_step(self) -> None:
        """Budget 3: a (prompt 4) runs chunks 3 then 1 (+ b's first 2 tokens); times by hand."""
        config = EngineConfig(engine_id="e0", token_budget_tokens=3)
        events, _ = _run([_spec("a", 0.0, 4, 2), _spec("b", 0.0, 2, 1)], config=config)
        steps = [e for e in events if isinstance(e, StepReport)]
        # step 0: a 3 tokens, r = 0 -> 0.002 + 0.003; step 1: a 1 + b 2, r = 0 -> 0.005;
        # step 2: a decodes (1) + nothing else left for b (finished at its first token) -> r = 1 -> 0.005
        assert [round(s.duration_s, 9) for s in steps] == [0.005, 0.005, 0.005]
        assert [s.sum_prefill_tokens for s in steps] == [3, 3, 0]
        finishes = {e.request_id: e.ts for e in events if isinstance(e, RequestFinished)}
        assert finishes == {"b": pytest.approx(0.010), "a": pytest.approx(0.015)}

    def test_max_tokens_cuts_output_and_finishes_with_length(self) -> None:
        events, _ = _run([_spec("a", 0.0, 4, 10, max_tokens=2)], config=EngineConfig(engine_id="e0"))
        finished = next(e for e in events if isinstance(e, RequestFinished))
        assert (finished.output_tokens, finished.finish_reason) == (2, "length")

    def test_request_larger_than_the_kv_cache_is_rejected_with_a_reason(self) -> None:
        config = EngineConfig(engine_id="e0", kv_blocks_total=4, block_size_tokens=16)
        events, metrics = _run([_spec("a", 0.0, 100, 10)], config=config)
        finished = next(e for e in events if isinstance(e, RequestFinished))
        assert finished.finish_reason == "error"
        assert metrics.rejections == [("e0", "a", "prompt+output 110 tokens exceeds the KV capacity")]

    @pytest.mark.paper(seed="001", ref="section 6.5")
    def test_mixed_batching_at_saturation_matches_the_mb_throughput_formula(self) -> None:
        """Spec 6.5 table, MB row: 1 / beta_MB(1/3) = 22,783 tok/s for Qwen3-8B H200 at mu_L 512, mu_O 256.

        One engine, 4096 requests at t = 0 (saturated), geometric outputs (CFR, the formula's case);
        throughput over 20-80 s, after the all-prefill warm-up. Tolerance 3% ("within a few percent").
        """
        h200 = EbTiming(
            alpha_p_s=1.2786e-3,
            beta_p_s_per_token=2.4853e-5,
            alpha_d_s=8.9212e-3,
            beta_d_s_per_seq=4.5865e-5,
            alpha_mb_s=0.0,
            c0_s_per_token=2.494e-5,
            c1_s_per_token=5.193e-5,
            c2_s_per_token=1.478e-5,
        )
        prompts, outputs = GeometricLengths(prompt_tokens=512, mean_output_tokens=256.0).sample(
            np.random.default_rng(0), 4096
        )
        requests = [_spec(f"r{i}", 0.0, int(p), int(o)) for i, (p, o) in enumerate(zip(prompts, outputs, strict=True))]
        config = EngineConfig(engine_id="e0", max_num_seqs=1024, token_budget_tokens=8192, kv_blocks_total=60_000)
        _, metrics = _run(requests, config=config, timing=h200, until_s=80.0)
        tokens = sum(sample[3] for sample in metrics.step_samples if 20.0 < sample[1] <= 80.0)
        assert tokens / 60.0 == pytest.approx(22_783, rel=0.03)


def _workload_requests(seed: int, rate: float, mean_out: float, prompt: int, duration_s: float) -> list[RequestSpec]:
    workload = Workload(
        phases=(
            WorkloadPhase(
                start_s=0.0,
                arrivals=PoissonArrivals(rate_per_s=rate),
                lengths=GeometricLengths(prompt_tokens=prompt, mean_output_tokens=mean_out),
            ),
        )
    )
    return workload.generate(duration_s, np.random.default_rng(seed))


class TestConservation:
    @settings(max_examples=25)
    @given(
        seed=st.integers(0, 10_000),
        rate=st.floats(5.0, 80.0),
        prompt=st.integers(1, 300),
        budget=st.integers(16, 512),
        kv_blocks=st.integers(40, 400),
        sarathi=st.booleans(),
    )
    def test_every_request_is_accounted_for_and_limits_hold(
        self, *, seed: int, rate: float, prompt: int, budget: int, kv_blocks: int, sarathi: bool
    ) -> None:
        """Small KV forces preemptions; arrivals = finished + rejected + in flight; KV, budget, slots hold."""
        requests = _workload_requests(seed, rate, 20.0, prompt, 3.0)
        config = EngineConfig(engine_id="e0", max_num_seqs=32, token_budget_tokens=budget, kv_blocks_total=kv_blocks)
        scheduler = SarathiServeScheduler() if sarathi else MixedChunkedScheduler()
        events, metrics = _run(requests, config=config, scheduler=scheduler, timing=FAST, until_s=4.0)
        arrived = {e.request_id for e in events if isinstance(e, RequestArrived)}
        finished = [e for e in events if isinstance(e, RequestFinished)]
        assert len(arrived) == len(requests)
        summary = metrics.summarize(4.0)
        assert summary.arrived == summary.finished + summary.rejected + summary.in_flight
        assert summary.in_flight >= 0
        assert len({e.request_id for e in finished}) == len(finished)
        by_id = {r.request_id: r for r in requests}
        for event in finished:
            if event.finish_reason != "error":
                assert event.output_tokens == by_id[event.request_id].target_output_tokens
        for step in (e for e in events if isinstance(e, StepReport)):
            assert step.kv_blocks_used <= step.kv_blocks_total
            assert step.sum_prefill_tokens + step.num_decode_requests <= budget
            assert step.num_running <= 32
        seqs = [e.seq for e in events]
        assert seqs == list(range(len(events)))
        assert [e.ts for e in events] == sorted(e.ts for e in events)

    def test_preempted_request_is_recomputed_and_still_finishes(self) -> None:
        requests = [_spec(f"r{i}", 0.0, 16, 40) for i in range(4)]
        config = EngineConfig(engine_id="e0", kv_blocks_total=10, block_size_tokens=16)
        events, metrics = _run(requests, config=config)
        preempted = [e for e in events if isinstance(e, RequestPreempted)]
        finished = [e for e in events if isinstance(e, RequestFinished)]
        assert preempted
        assert len(finished) == 4
        assert sum(e.preemptions for e in finished) == len(preempted) == metrics.preemptions


class _PolicyScheduler:
    """Mixed batching that watches an ``admission`` document and records what it saw."""

    def __init__(self) -> None:
        self.seen: list[int | None] = []

    @property
    def policy_kind(self) -> str | None:
        return "admission"

    def schedule(self, view: EngineView) -> BatchPlan:
        self.seen.append(None if view.policy is None else view.policy.version)
        return MixedChunkedScheduler().schedule(view)


class TestPolicies:
    def test_new_version_is_acknowledged_once_and_expiry_falls_back_to_none(self) -> None:
        document = AdmissionPolicy(
            scope="e0",
            deployment="test",
            version=3,
            computed_at=0.0,
            valid_until=0.05,
            inputs=InputsDigest(snapshot_id="s1"),
            payload=AdmissionPayload(pressure=0.1, level="ok", admit_fraction=1.0),
            state=AdmissionState(smoothed_pressure=0.1, level="ok"),
        )
        scheduler = _PolicyScheduler()
        events, _ = _run(
            [_spec("a", 0.0, 8, 30)],
            config=EngineConfig(engine_id="e0"),
            scheduler=scheduler,
            source=StaticPolicySource([document]),
        )
        acks = [e for e in events if isinstance(e, PolicyApplied)]
        assert [(a.kind, a.scope, a.version) for a in acks] == [("admission", "e0", 3)]
        assert scheduler.seen[0] == 3
        assert scheduler.seen[-1] is None
        finished = next(e for e in events if isinstance(e, RequestFinished))
        assert finished.policy_versions == {"admission": 3}


class TestDeterminism:
    def test_same_seed_gives_identical_event_streams(self) -> None:
        requests = _workload_requests(9, 30.0, 30.0, 64, 2.0)
        config = EngineConfig(engine_id="e0", kv_blocks_total=200)
        first, _ = _run(requests, config=config, timing=FAST, until_s=3.0)
        second, _ = _run(requests, config=config, timing=FAST, until_s=3.0)
        assert [e.model_dump_json() for e in first] == [e.model_dump_json() for e in second]
        assert Counter(type(e).__name__ for e in first)["StepReport"] > 100
