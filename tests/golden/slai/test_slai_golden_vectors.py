"""Spec §3.4 / §5.5 worked examples: deferral windows, LSTs, the dynamic rule, the admission check."""

from __future__ import annotations

import pytest

from policies.slai.batch_builder import BuilderParams, KvView, RequestView, SchedulerQueues, build_slai_batch
from policies.slai.deadline import deferral_window_s, last_schedulable_time, safety_floor_delta
from policies.slai.offset_rule import OffsetRule, offset_for_kv_use
from policies.slai.params import PrefillOrder, SlaiParams


@pytest.mark.paper(seed="000", ref="spec §3.4 deferral-window examples")
@pytest.mark.parametrize(
    ("tbar_s", "tbt_s", "delta", "window_s"),
    [
        (0.05, 0.1, 5.0, -0.15),  # paid at tbar 0.05: delta >= 2 gives W <= 0, always critical
        (0.05, 0.1, 10.0, -0.4),
        (0.05, 0.5, 10.0, 0.0),  # "delta = 10 gives W = 0 (no deferral)"
        (0.05, 0.5, 5.0, 0.25),  # "delta = 5 gives W = 0.25 s"
        (0.025, 0.5, 10.0, 0.25),  # "tbar 0.025 s, so W_free = 0.25 s even at delta = 10"
        (0.025, 0.5, 5.0, 0.375),
        (0.025, 0.1, 5.0, -0.025),
        (0.025, 0.1, 10.0, -0.15),
    ],
)
def test_deferral_window_examples(tbar_s: float, tbt_s: float, delta: float, window_s: float) -> None:
    assert deferral_window_s(tbt_slo_s=tbt_s, delta=delta, tbar_s=tbar_s) == pytest.approx(window_s, abs=1e-12)


@pytest.mark.paper(seed="000", ref="spec §5.5 G1")
def test_g1_free_tier_deadline_is_10_25() -> None:
    """G1: e = 10.000, TBT = 0.5, delta = 5, tbar = 0.05 -> C = 10.25."""
    assert last_schedulable_time(last_batch_end_s=10.0, tbt_slo_s=0.5, delta=5.0, tbar_s=0.05) == pytest.approx(10.25)


@pytest.mark.paper(seed="000", ref="paper §7.1; spec §5.5 G2")
@pytest.mark.parametrize(("kv_use_frac", "delta"), [(0.9599, 5.0), (0.96, 10.0), (1.0, 10.0)])
def test_g2_dynamic_rule(kv_use_frac: float, delta: float) -> None:
    assert offset_for_kv_use(kv_use_frac, OffsetRule.from_params(SlaiParams())) == delta


@pytest.mark.paper(seed="000", ref="spec §5.5 G4")
@pytest.mark.parametrize(("free_blocks", "admitted"), [(655, False), (656, True)])
def test_g4_admission_of_an_8141_token_prompt_needs_656_free_blocks(free_blocks: int, admitted: bool) -> None:
    """G4: ceil(8141/16) = 509 blocks; admit iff free - 509 >= floor(0.01 * 14733) = 147."""
    queues = SchedulerQueues(waiting=(RequestView(request_id="big", arrival_s=0.0, prompt_tokens=8141, tbt_slo_s=0.5),))
    kv = KvView(free_blocks=free_blocks, total_blocks=14733)
    plan = build_slai_batch(1.0, queues, kv, BuilderParams(prefill_order=PrefillOrder.FCFS))
    assert (plan.admitted == ("big",)) is admitted


@pytest.mark.paper(seed="000", ref="spec §3.4 safety")
@pytest.mark.parametrize(("delta", "margin"), [(5.0, 2.5), (10.0, 5.0)])
def test_safety_floor_is_two_batches_so_paper_deltas_give_2_5x_and_5x_margin(delta: float, margin: float) -> None:
    """Spec §3.4: "The deadline holds if delta >= 2*T_B,max/tbar. delta = 5 and 10 give 2.5x to 5x margin"."""
    delta_min = safety_floor_delta(step_time_p99_s=0.05, tbar_s=0.05)
    assert delta_min == pytest.approx(2.0)
    assert delta / delta_min == pytest.approx(margin)
