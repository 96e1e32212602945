"""Engine-side SLAI and its baselines: LST bookkeeping, the pushed rule, reservations, preemption, the engine."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.slai import OffsetMode, PrefillOrder, SlaiInputs, SlaiParams, decide
from schemas.policy_docs.base import InputsDigest, PolicyDocument
from schemas.policy_docs.slai import SlaiPolicy, SlaiState
from services.sdk.protocol import ListSink, StaticPolicySource
from services.sim.engine import EngineConfig, SimEngine
from services.sim.request import RequestSpec, SimRequest, blocks_for_tokens
from services.sim.routing import LeastLoadedRouter
from services.sim.run_summary import MetricsRecorder
from services.sim.schedulers.baselines import SarathiServeScheduler, VllmPrefillFirstScheduler
from services.sim.schedulers.slai import SlaiScheduler, safe_default_payload
from services.sim.simulation import Simulation
from services.sim.telemetry import EngineTelemetry
from services.sim.timing import SlaiTiming


@dataclass
class FakeView:
    """An ``EngineView`` the test sets by hand."""

    now_s: float
    running: list[SimRequest] = field(default_factory=list)
    waiting: list[SimRequest] = field(default_factory=list)
    kv_blocks_free: int = 1000
    kv_blocks_total: int = 1000
    block_size_tokens: int = 16
    max_num_seqs: int = 128
    token_budget_tokens: int = 512
    policy: PolicyDocument | None = None


def _waiting(rid: str, prompt: int, *, tier: str = "free", arrival_s: float = 0.0) -> SimRequest:
    return SimRequest(
        RequestSpec(request_id=rid, arrival_s=arrival_s, prompt_tokens=prompt, output_tokens=50, tier=tier)
    )


def _decoding(rid: str, prompt: int, *, tier: str = "free", generated: int = 1) -> SimRequest:
    r = _waiting(rid, prompt, tier=tier)
    r.computed_tokens = prompt + generated - 1
    r.generated_tokens = generated
    r.kv_blocks = blocks_for_tokens(r.computed_tokens, 16)
    return r


def _finish_batch(requests: list[SimRequest], end_s: float) -> None:
    """What the engine does at a batch's end for decodes: one token each, at ``end_s``."""
    for r in requests:
        r.computed_tokens += 1
        r.generated_tokens += 1
        r.kv_blocks = blocks_for_tokens(r.computed_tokens, 16)
        r.last_token_s = end_s


def _policy(params: SlaiParams, *, valid_until: float = 1e6) -> SlaiPolicy:
    payload = decide(SlaiInputs(), None, params, 0.0).payload
    return SlaiPolicy(
        scope="e0",
        deployment="test",
        version=1,
        computed_at=0.0,
        valid_until=valid_until,
        inputs=InputsDigest(snapshot_id="s1"),
        payload=payload,
        state=SlaiState(),
    )


def _ids(requests: tuple[SimRequest, ...]) -> list[str]:
    return [r.spec.request_id for r in requests]


class TestSafeDefault:
    def test_is_the_paper_dynamic_rule_with_spf_and_paper_caps(self) -> None:
        """Spec §8 P16: without a valid document the engine runs dynamic 5/10 at 0.96."""
        p = safe_default_payload()
        assert (p.mode, p.delta_lo, p.delta_hi, p.kv_threshold_frac) == ("dynamic", 5.0, 10.0, 0.96)
        assert (p.prefill_order, p.token_budget_tokens, p.max_active, p.max_decodes) == ("spf", 512, 128, 128)
        assert p.tier_tbt_s == {"paid": 0.1, "free": 0.5}


class TestSlaiLastSchedulableTime:
    def _two_batches(self, *, kv_blocks_free: int, policy: SlaiPolicy | None = None) -> tuple[SlaiScheduler, FakeView]:
        scheduler = SlaiScheduler()
        free, paid = _decoding("f", 100), _decoding("p", 100, tier="paid")
        first = scheduler.schedule(FakeView(now_s=0.0, running=[free, paid], policy=policy))
        assert sorted(_ids(first.decodes)) == ["f", "p"]
        _finish_batch([free, paid], end_s=0.05)
        view = FakeView(now_s=0.05, running=[free, paid], kv_blocks_free=kv_blocks_free, policy=policy)
        return scheduler, view

    def test_free_decode_gets_e_plus_tbt_minus_delta_lo_tbar_below_the_threshold(self) -> None:
        """Eq. 8 with tbar = 0.05 s (one batch) and delta = 5: C = 0.05 + 0.5 - 0.25 = 0.30."""
        scheduler, view = self._two_batches(kv_blocks_free=100)  # KV use 0.90 < 0.96
        scheduler.schedule(view)
        assert scheduler.tbar_s == pytest.approx(0.05)
        assert scheduler.last_delta == 5.0
        assert scheduler.last_schedulable_s("f") == pytest.approx(0.30)
        assert scheduler.last_schedulable_s("p") == pytest.approx(0.05 + 0.1 - 0.25)

    def test_delta_switches_to_delta_hi_at_the_kv_threshold(self) -> None:
        """Paper §7.1 with >=: at exactly 96% KV use delta = 10, so C = e + 0.5 - 0.5 = e."""
        scheduler, view = self._two_batches(kv_blocks_free=40)  # KV use exactly 0.96
        plan = scheduler.schedule(view)
        assert scheduler.last_delta == 10.0
        assert scheduler.last_schedulable_s("f") == pytest.approx(0.05)
        assert sorted(_ids(plan.decodes)) == ["f", "p"]  # both critical at now = C

    def test_pushed_fixed_offset_replaces_the_dynamic_rule(self) -> None:
        policy = _policy(SlaiParams(offset_mode=OffsetMode.FIXED, delta_fixed=2.0))
        scheduler, view = self._two_batches(kv_blocks_free=40, policy=policy)
        scheduler.schedule(view)
        assert scheduler.last_delta == 2.0
        assert scheduler.last_schedulable_s("f") == pytest.approx(0.05 + 0.5 - 0.1)

    def test_deferrable_free_decode_yields_its_budget_to_prefills_while_paid_runs(self) -> None:
        scheduler, view = self._two_batches(kv_blocks_free=500)
        view.waiting = [_waiting("w", 2000, arrival_s=0.01)]
        plan = scheduler.schedule(view)
        assert _ids(plan.decodes) == ["p"]
        assert [(r.spec.request_id, c) for r, c in plan.prefills] == [("w", 511)]

    def test_deferred_decode_keeps_its_c_and_runs_once_it_is_due(self) -> None:
        scheduler, view = self._two_batches(kv_blocks_free=500)
        long_prompt = _waiting("w", 5000, arrival_s=0.01)
        view.waiting = [long_prompt]
        scheduler.schedule(view)  # f deferred, C = 0.30; p and a chunk of w run
        p = view.running[1]
        _finish_batch([p], end_s=0.29)
        long_prompt.computed_tokens, long_prompt.kv_blocks = 511, 32
        early = FakeView(now_s=0.29, running=[*view.running, long_prompt], kv_blocks_free=500)
        assert "f" not in _ids(scheduler.schedule(early).decodes)
        _finish_batch([p], end_s=0.31)
        long_prompt.computed_tokens, long_prompt.kv_blocks = 1022, 64
        due = FakeView(now_s=0.31, running=[*view.running, long_prompt], kv_blocks_free=500)
        assert scheduler.last_schedulable_s("f") == pytest.approx(0.30)
        assert "f" in _ids(scheduler.schedule(due).decodes)


class TestSlaiPrefillsAndKv:
    def test_pushed_fcfs_order_admits_in_arrival_order(self) -> None:
        waiting = [_waiting("long", 400, arrival_s=1.0), _waiting("short", 50, arrival_s=2.0)]
        spf = SlaiScheduler().schedule(FakeView(now_s=3.0, waiting=list(waiting)))
        fcfs_policy = _policy(SlaiParams(prefill_order=PrefillOrder.FCFS))
        fcfs = SlaiScheduler().schedule(FakeView(now_s=3.0, waiting=list(waiting), policy=fcfs_policy))
        assert [(r.spec.request_id, c) for r, c in spf.prefills] == [("short", 50), ("long", 400)]
        assert [(r.spec.request_id, c) for r, c in fcfs.prefills] == [("long", 400), ("short", 50)]

    def test_a_paused_prefill_reserves_its_whole_prompt(self) -> None:
        """Spec §8 P8: 1600 prompt tokens reserve 100 blocks; with 25 still outstanding, 30 free
        blocks leave 5, and a 1-block admission would cut into the 10-block watermark (it would
        pass if blocks were only counted as chunks take them: 30 - 1 >= 10)."""
        scheduler = SlaiScheduler()
        paused = _waiting("paused", 1600)
        first = scheduler.schedule(FakeView(now_s=0.0, waiting=[paused], token_budget_tokens=16))
        assert [(r.spec.request_id, c) for r, c in first.prefills] == [("paused", 16)]
        paused.computed_tokens, paused.kv_blocks = 1200, 75
        view = FakeView(now_s=0.05, running=[paused], waiting=[_waiting("tiny", 16)], kv_blocks_free=30)
        plan = scheduler.schedule(view)
        assert [(r.spec.request_id, c) for r, c in plan.prefills] == [("paused", 400)]
        roomy = FakeView(now_s=0.06, running=[paused], waiting=[_waiting("tiny", 16)], kv_blocks_free=40)
        assert [(r.spec.request_id, c) for r, c in scheduler.schedule(roomy).prefills] == [
            ("paused", 400),
            ("tiny", 16),
        ]

    def test_kv_exhaustion_preempts_the_newest_paused_prefill_before_the_decode(self) -> None:
        """Spec §8 P10: SLAI evicts paused prefills first; Sarathi evicts the newest running request."""
        decode = _decoding("d", 32)  # next token needs a new block (33 tokens -> 3 blocks)
        older, newer = _waiting("older", 800), _waiting("newer", 800)
        slai = SlaiScheduler()
        slai.schedule(FakeView(now_s=0.0, waiting=[older, newer], token_budget_tokens=2))
        for r in (older, newer):
            r.computed_tokens, r.kv_blocks = 1, 1
        view = FakeView(now_s=0.05, running=[decode, older, newer], kv_blocks_free=0)
        plan = slai.schedule(view)
        assert _ids(plan.preempted) == ["newer"]
        assert _ids(plan.decodes) == ["d"]
        sarathi = SarathiServeScheduler().schedule(FakeView(now_s=0.05, running=[decode, older, newer]))
        assert _ids(sarathi.decodes) == ["d"]


class TestBaselines:
    def test_sarathi_runs_every_decode_then_fcfs_chunks(self) -> None:
        decodes = [_decoding(f"d{i}", 100) for i in range(3)]
        waiting = [_waiting("long", 600, arrival_s=1.0), _waiting("short", 10, arrival_s=2.0)]
        plan = SarathiServeScheduler().schedule(FakeView(now_s=3.0, running=decodes, waiting=waiting))
        assert _ids(plan.decodes) == ["d0", "d1", "d2"]
        assert [(r.spec.request_id, c) for r, c in plan.prefills] == [("long", 509)]

    def test_sarathi_spf_admits_the_shortest_first(self) -> None:
        waiting = [_waiting("long", 600, arrival_s=1.0), _waiting("short", 10, arrival_s=2.0)]
        plan = SarathiServeScheduler(prefill_order=PrefillOrder.SPF).schedule(FakeView(now_s=3.0, waiting=waiting))
        assert [(r.spec.request_id, c) for r, c in plan.prefills] == [("short", 10), ("long", 502)]

    def test_vllm_runs_whole_prompts_alone_then_decodes_alone(self) -> None:
        decode = _decoding("d", 100)
        prompt = _waiting("w", 3000)
        scheduler = VllmPrefillFirstScheduler()
        plan = scheduler.schedule(FakeView(now_s=1.0, running=[decode], waiting=[prompt], token_budget_tokens=8192))
        assert plan.decodes == ()
        assert [(r.spec.request_id, c) for r, c in plan.prefills] == [("w", 3000)]
        decode_only = scheduler.schedule(FakeView(now_s=1.1, running=[decode], token_budget_tokens=8192))
        assert (_ids(decode_only.decodes), decode_only.prefills) == (["d"], ())


class TestOnTheEngine:
    @settings(max_examples=15)
    @given(
        st.lists(
            st.tuples(st.floats(0.0, 5.0), st.integers(1, 900), st.integers(1, 60), st.booleans()),
            min_size=1,
            max_size=25,
        )
    )
    def test_every_request_finishes_within_the_engine_limits(self, draws: list[tuple[float, int, int, bool]]) -> None:
        """Small KV (160 blocks) forces reservations, watermark stalls and preemptions; the engine
        refuses any plan over its KV, budget or slots, so finishing everything shows the plans fit."""
        specs = sorted(
            (
                RequestSpec(
                    request_id=f"r{i}",
                    arrival_s=t,
                    prompt_tokens=p,
                    output_tokens=o,
                    tier="paid" if paid else "free",
                )
                for i, (t, p, o, paid) in enumerate(draws)
            ),
            key=lambda s: s.arrival_s,
        )
        config = EngineConfig(engine_id="e0", max_num_seqs=8, token_budget_tokens=512, kv_blocks_total=160)
        metrics = MetricsRecorder()
        engine = SimEngine(
            config,
            scheduler=SlaiScheduler(),
            timing=SlaiTiming(),
            telemetry=EngineTelemetry(engine_id="e0", deployment="test", sink=ListSink()),
            policy_source=StaticPolicySource(),
            metrics=metrics,
        )
        simulation = Simulation(engines=[engine], router=LeastLoadedRouter(), requests=specs, metrics=metrics)
        simulation.run(600.0)
        summary = metrics.summarize(600.0)
        assert summary.finished + summary.rejected == len(specs)
