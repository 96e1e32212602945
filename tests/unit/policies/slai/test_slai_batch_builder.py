"""Batch builders on hand-built queues: order, the critical boundary, budget packing, preemption."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.slai.batch_builder import (
    BatchPlan,
    BuilderParams,
    EntryKind,
    KvView,
    RequestView,
    SchedulerKind,
    SchedulerQueues,
    build_batch,
    build_sarathi_batch,
    build_slai_batch,
    build_vllm_batch,
    order_waiting,
)
from policies.slai.params import PrefillOrder
from schemas.errors import InvalidInputError

ROOMY_KV = KvView(free_blocks=10_000, total_blocks=14_733)


def decode(rid: str, lst_s: float, *, arrival_s: float = 0.0, tbt_s: float = 0.5, held: int = 10) -> RequestView:
    """A decode-phase request with 100 prompt and 10 output tokens (context 110 fits in 7 blocks)."""
    return RequestView(
        request_id=rid,
        arrival_s=arrival_s,
        prompt_tokens=100,
        prefilled_tokens=100,
        output_tokens=10,
        tbt_slo_s=tbt_s,
        kv_blocks_held=held,
        last_batch_end_s=lst_s - 0.25,
        last_schedulable_s=lst_s,
    )


def waiting(rid: str, arrival_s: float, prompt: int, *, paid: bool = False) -> RequestView:
    return RequestView(request_id=rid, arrival_s=arrival_s, prompt_tokens=prompt, tbt_slo_s=0.5, paid=paid)


def paused(rid: str, prompt: int, done: int, *, arrival_s: float = 50.0) -> RequestView:
    held = -(-prompt // 16)
    return RequestView(
        request_id=rid,
        arrival_s=arrival_s,
        prompt_tokens=prompt,
        prefilled_tokens=done,
        tbt_slo_s=0.5,
        kv_blocks_held=held,
    )


def layout(plan: BatchPlan) -> list[tuple[str, int]]:
    return [(e.request_id, e.tokens) for e in plan.entries]


def g3_queues(*, p1_left: int = 300, only_w3: bool = False) -> SchedulerQueues:
    decodes = (
        decode("A", 99.90, arrival_s=1.0),
        decode("B", 100.30, arrival_s=2.0),
        decode("C", 99.95, arrival_s=3.0),
        decode("D", 100.10, arrival_s=4.0),
    )
    w = (
        (waiting("W3", 99.0, 50),)
        if only_w3
        else (
            waiting("W1", 97.0, 1000),
            waiting("W2", 98.0, 100),
            waiting("W3", 99.0, 50),
            waiting("W4", 100.5, 10),
        )
    )
    return SchedulerQueues(decodes=decodes, paused_prefills=(paused("P1", 1000, 1000 - p1_left),), waiting=w)


class TestSlaiBatchOrder:
    def test_critical_then_partial_then_spf_new_prefills_fill_the_budget(self) -> None:
        """Spec §5.5 G3, SLAI-SPF."""
        plan = build_slai_batch(100.0, g3_queues(), ROOMY_KV, BuilderParams())
        assert layout(plan) == [("A", 1), ("C", 1), ("P1", 300), ("W3", 50), ("W2", 100), ("W1", 60)]
        assert plan.tokens == 512
        assert [e.kind for e in plan.entries[:3]] == [
            EntryKind.CRITICAL_DECODE,
            EntryKind.CRITICAL_DECODE,
            EntryKind.PARTIAL_PREFILL,
        ]
        assert plan.admitted == ("W3", "W2", "W1")

    def test_fcfs_admits_the_oldest_arrival_first(self) -> None:
        """Spec §5.5 G3, SLAI-FCFS."""
        params = BuilderParams(prefill_order=PrefillOrder.FCFS)
        plan = build_slai_batch(100.0, g3_queues(), ROOMY_KV, params)
        assert layout(plan) == [("A", 1), ("C", 1), ("P1", 300), ("W1", 210)]

    def test_leftover_budget_takes_non_critical_decodes_in_ascending_lst(self) -> None:
        """Spec §5.5 G3, leftover case."""
        plan = build_slai_batch(100.0, g3_queues(p1_left=100, only_w3=True), ROOMY_KV, BuilderParams())
        assert layout(plan) == [("A", 1), ("C", 1), ("P1", 100), ("W3", 50), ("D", 1), ("B", 1)]
        assert plan.tokens == 154
        assert (plan.critical_decodes, plan.noncritical_decodes) == (2, 2)

    def test_paid_first_puts_paid_prompts_before_shorter_free_ones(self) -> None:
        queues = SchedulerQueues(waiting=(waiting("F", 1.0, 10), waiting("P", 2.0, 300, paid=True)))
        params = BuilderParams(prefill_order=PrefillOrder.SPF_PAID_FIRST)
        assert layout(build_slai_batch(5.0, queues, ROOMY_KV, params)) == [("P", 300), ("F", 10)]

    def test_prompt_over_max_model_length_is_ignored_and_the_next_admitted(self) -> None:
        queues = SchedulerQueues(waiting=(waiting("long", 1.0, 9000), waiting("ok", 2.0, 20)))
        plan = build_slai_batch(5.0, queues, ROOMY_KV, BuilderParams(prefill_order=PrefillOrder.FCFS))
        assert plan.ignored == ("long",)
        assert layout(plan) == [("ok", 20)]

    def test_decode_without_last_schedulable_time_is_refused(self) -> None:
        bare = RequestView(request_id="x", arrival_s=0.0, prompt_tokens=4, prefilled_tokens=4, tbt_slo_s=0.1)
        with pytest.raises(InvalidInputError, match="last_schedulable_s"):
            build_slai_batch(1.0, SchedulerQueues(decodes=(bare,)), ROOMY_KV, BuilderParams())


class TestCriticalBoundary:
    @pytest.mark.parametrize(
        ("now_s", "kind"), [(10.2499, EntryKind.NONCRITICAL_DECODE), (10.25, EntryKind.CRITICAL_DECODE)]
    )
    def test_decode_turns_critical_exactly_at_its_last_schedulable_time(self, now_s: float, kind: EntryKind) -> None:
        """Spec §5.5 G1: C = 10.25; at 10.2499 deferrable, at 10.25 critical (>=)."""
        queues = SchedulerQueues(decodes=(decode("r", 10.25),), waiting=(waiting("w", 0.0, 600),))
        plan = build_slai_batch(now_s, queues, ROOMY_KV, BuilderParams())
        decodes = [e for e in plan.entries if e.request_id == "r"]
        if kind is EntryKind.CRITICAL_DECODE:
            assert plan.entries[0].request_id == "r"
            assert decodes[0].kind is kind
        else:
            assert decodes == []  # the prefill took the whole budget; the deferrable decode waits
            assert layout(plan) == [("w", 512)]


class TestBudgetPacking:
    def test_beta_caps_critical_decodes_and_leaves_the_rest_in_the_heap(self) -> None:
        queues = SchedulerQueues(decodes=tuple(decode(f"d{i}", 1.0 + i / 100) for i in range(5)))
        plan = build_slai_batch(2.0, queues, ROOMY_KV, BuilderParams(max_decodes=3))
        assert [e.request_id for e in plan.entries] == ["d0", "d1", "d2"]

    def test_alpha_stops_admission_when_active_requests_reach_the_cap(self) -> None:
        queues = SchedulerQueues(decodes=(decode("d", 5.0),), waiting=(waiting("w1", 0.0, 10), waiting("w2", 0.0, 10)))
        plan = build_slai_batch(1.0, queues, ROOMY_KV, BuilderParams(max_active=2))
        assert plan.admitted == ("w1",)

    def test_admission_is_head_of_line_at_the_kv_watermark(self) -> None:
        """Spec §5.5 G4: an 8141-token prompt needs 509 blocks and 147 must stay free, so 656 admit it."""
        queues = SchedulerQueues(waiting=(waiting("big", 0.0, 8141), waiting("small", 0.0, 10)))
        fcfs = BuilderParams(prefill_order=PrefillOrder.FCFS)
        blocked = build_slai_batch(1.0, queues, KvView(free_blocks=655, total_blocks=14_733), fcfs)
        assert blocked.entries == ()
        admitted = build_slai_batch(1.0, queues, KvView(free_blocks=656, total_blocks=14_733), fcfs)
        assert admitted.admitted == ("big",)
        assert admitted.free_blocks_after == 147

    @settings(max_examples=60)
    @given(
        lsts=st.lists(st.floats(min_value=0.0, max_value=2.0), max_size=40),
        prompts=st.lists(st.integers(min_value=1, max_value=3000), max_size=12),
        budget=st.integers(min_value=1, max_value=1024),
        beta=st.integers(min_value=1, max_value=64),
    )
    def test_any_plan_respects_budget_beta_and_critical_first(
        self, lsts: list[float], prompts: list[int], budget: int, beta: int
    ) -> None:
        queues = SchedulerQueues(
            decodes=tuple(decode(f"d{i}", t) for i, t in enumerate(lsts)),
            waiting=tuple(waiting(f"w{i}", 0.0, p) for i, p in enumerate(prompts)),
        )
        plan = build_slai_batch(1.0, queues, ROOMY_KV, BuilderParams(token_budget_tokens=budget, max_decodes=beta))
        assert plan.tokens == sum(e.tokens for e in plan.entries) <= budget
        assert plan.critical_decodes + plan.noncritical_decodes <= beta
        kinds = [e.kind for e in plan.entries]
        if EntryKind.NONCRITICAL_DECODE in kinds:
            first_noncritical = kinds.index(EntryKind.NONCRITICAL_DECODE)
            assert EntryKind.CRITICAL_DECODE not in kinds[first_noncritical:]
            assert all(e.kind is not EntryKind.NEW_PREFILL for e in plan.entries[first_noncritical:])


class TestPreemptionOrder:
    def full_kv_queues(self) -> SchedulerQueues:
        # context 16 + 16 = 32 tokens over 1 held block: each decode needs a new block
        crit = RequestView(
            request_id="crit",
            arrival_s=1.0,
            prompt_tokens=16,
            prefilled_tokens=16,
            output_tokens=16,
            tbt_slo_s=0.1,
            kv_blocks_held=1,
            last_schedulable_s=0.0,
        )
        return SchedulerQueues(
            decodes=(crit,),
            paused_prefills=(paused("old", 64, 16, arrival_s=2.0), paused("new", 48, 16, arrival_s=3.0)),
        )

    def test_slai_evicts_the_newest_paused_prefill_before_the_decode(self) -> None:
        plan = build_slai_batch(1.0, self.full_kv_queues(), KvView(free_blocks=0, total_blocks=100), BuilderParams())
        assert [(p.request_id, p.kv_blocks_freed, p.in_prefill) for p in plan.preempted] == [("new", 3, True)]
        assert layout(plan) == [("crit", 1), ("old", 48)]

    def test_slai_evicts_the_decode_itself_when_no_paused_prefill_is_left(self) -> None:
        queues = SchedulerQueues(decodes=self.full_kv_queues().decodes)
        plan = build_slai_batch(1.0, queues, KvView(free_blocks=0, total_blocks=100), BuilderParams())
        assert [p.request_id for p in plan.preempted] == ["crit"]
        assert plan.entries == ()

    def test_sarathi_evicts_the_newest_running_request(self) -> None:
        queues = SchedulerQueues(
            decodes=(decode("old", 0.0, arrival_s=1.0, held=7), decode("young", 0.0, arrival_s=9.0, held=7)),
            paused_prefills=(paused("mid", 64, 16, arrival_s=5.0),),
        )
        plan = build_sarathi_batch(1.0, queues, KvView(free_blocks=0, total_blocks=100), BuilderParams())
        assert [p.request_id for p in plan.preempted] == ["young"]
        assert layout(plan) == [("old", 1), ("mid", 48)]


class TestSarathiBatch:
    def test_every_decode_then_partial_prefill_then_fcfs_admission(self) -> None:
        """Spec §5.5 G3, Sarathi-FCFS."""
        params = BuilderParams(scheduler=SchedulerKind.SARATHI, prefill_order=PrefillOrder.FCFS)
        plan = build_batch(100.0, g3_queues(), ROOMY_KV, params)
        assert layout(plan) == [("A", 1), ("B", 1), ("C", 1), ("D", 1), ("P1", 300), ("W1", 208)]

    def test_spf_variant_admits_shortest_arrived_prompts_first(self) -> None:
        params = BuilderParams(scheduler=SchedulerKind.SARATHI)
        plan = build_batch(100.0, g3_queues(), ROOMY_KV, params)
        assert layout(plan)[5:] == [("W3", 50), ("W2", 100), ("W1", 58)]


class TestVllmBatch:
    def test_whole_prompts_first_and_no_decode_beside_them(self) -> None:
        queues = SchedulerQueues(
            decodes=(decode("d", 0.0),),
            waiting=(waiting("w1", 0.0, 5000), waiting("w2", 0.0, 3000), waiting("w3", 0.0, 500)),
        )
        plan = build_vllm_batch(1.0, queues, ROOMY_KV, BuilderParams(scheduler=SchedulerKind.VLLM))
        assert layout(plan) == [("w1", 5000), ("w2", 3000)]

    def test_decode_only_batch_when_nothing_can_be_admitted(self) -> None:
        queues = SchedulerQueues(decodes=(decode("d2", 0.0, arrival_s=2.0), decode("d1", 0.0, arrival_s=1.0)))
        plan = build_vllm_batch(1.0, queues, ROOMY_KV, BuilderParams())
        assert layout(plan) == [("d1", 1), ("d2", 1)]

    def test_paused_prefills_are_refused(self) -> None:
        with pytest.raises(InvalidInputError, match="never chunks"):
            build_vllm_batch(1.0, SchedulerQueues(paused_prefills=(paused("p", 64, 16),)), ROOMY_KV, BuilderParams())


class TestOrderWaiting:
    def test_only_the_arrived_prefix_is_sorted_and_ties_keep_queue_order(self) -> None:
        queue = [waiting("a", 1.0, 30), waiting("b", 2.0, 10), waiting("c", 3.0, 10), waiting("late", 9.0, 1)]
        ordered = order_waiting(queue, 5.0, PrefillOrder.SPF)
        assert [r.request_id for r in ordered] == ["b", "c", "a", "late"]


class TestViews:
    def test_prefilled_beyond_prompt_is_refused_with_the_request_named(self) -> None:
        with pytest.raises(InvalidInputError, match="request r"):
            RequestView(request_id="r", arrival_s=0.0, prompt_tokens=4, prefilled_tokens=5, tbt_slo_s=0.1)

    def test_kv_watermark_blocks_is_one_percent_floored(self) -> None:
        assert KvView(free_blocks=0, total_blocks=14_733).watermark_blocks == 147
