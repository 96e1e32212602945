"""Unit tests of policies/ebplus/phase_machine.py: the EB(k) cycle, the KV gate (Eq. 23) and the MB fallback."""

from __future__ import annotations

import dataclasses

import pytest

from policies.ebplus.phase_machine import (
    EngineView,
    Phase,
    PhaseState,
    StepKind,
    kv_gate_fraction,
    live_payload,
    step,
)
from schemas.errors import InvalidInputError
from schemas.policy_docs.base import InputsDigest
from schemas.policy_docs.ebplus import EbplusFallback, EbplusMode, EbplusPayload, EbplusPolicy, EbplusState, KvGate


def _policy(mode: EbplusMode = "EB", *, n: int = 100, theta: float = 0.2, valid_until: float = 100.0) -> EbplusPolicy:
    payload = EbplusPayload(
        mode=mode,
        theta=theta,
        k=int(theta * n),
        n=n,
        kv_gate=KvGate(),
        mu_l_tokens=512.0,
        mu_o_tokens=256.0,
        calib_id="qwen3-8b@rtx-pro-6000",
        fallback=EbplusFallback(n=256),
    )
    return EbplusPolicy(
        scope="e0",
        deployment="d",
        version=1,
        computed_at=0.0,
        valid_until=valid_until,
        inputs=InputsDigest(snapshot_id="s"),
        payload=payload,
        state=EbplusState(mode=mode),
    )


VIEW = EngineView(
    now_s=1.0,
    waiting_seqs=1000,
    decoding_seqs=0,
    prefilling_seqs=0,
    kv_free_blocks=100_000,
    kv_total_blocks=100_000,
    block_size_tokens=16,
    max_num_seqs=256,
)


class TestFallback:
    def test_missing_policy_falls_back_to_mixed_batching(self) -> None:
        result = step(VIEW, None, None)
        assert (result.action.kind, result.action.fallback, result.action.admit_seqs) == (StepKind.MIXED, True, 256)

    def test_stale_policy_falls_back_to_mixed_batching(self) -> None:
        result = step(dataclasses.replace(VIEW, now_s=100.5), None, _policy(valid_until=100.0))
        assert (result.action.kind, result.action.fallback) == (StepKind.MIXED, True)
        assert live_payload(_policy(valid_until=100.0), 100.0) is not None

    def test_pushed_mb_mode_runs_mixed_and_clears_the_phase(self) -> None:
        eb_state = PhaseState(phase=Phase.DECODE, n_seqs=100)
        result = step(VIEW, eb_state, _policy("MB"))
        assert (result.action.kind, result.action.fallback, result.state.phase) == (StepKind.MIXED, False, Phase.MIXED)


class TestEbCycle:
    def test_idle_engine_entering_eb_prefills_up_to_n(self) -> None:
        result = step(VIEW, None, _policy(n=100))
        assert (result.action.kind, result.action.admit_seqs, result.state.phase) == (
            StepKind.PREFILL,
            100,
            Phase.INITIAL_PREFILL,
        )

    def test_pushed_n_is_capped_by_max_num_seqs(self) -> None:
        result = step(dataclasses.replace(VIEW, max_num_seqs=64), None, _policy(n=100))
        assert result.action.n_seqs == 64

    def test_full_batch_moves_to_decode(self) -> None:
        state = PhaseState(phase=Phase.INITIAL_PREFILL, n_seqs=100)
        result = step(dataclasses.replace(VIEW, decoding_seqs=100), state, _policy(n=100))
        assert (result.action.kind, result.state.phase, result.action.k_seqs) == (StepKind.DECODE, Phase.DECODE, 20)

    def test_saturated_decode_refills_exactly_after_k_completions(self) -> None:
        """theta = 0.2, N = 100: k = 20; with a long queue the refill starts when 80 are left decoding."""
        state = PhaseState(phase=Phase.DECODE, n_seqs=100, last_n_update_s=1.0)
        before = step(dataclasses.replace(VIEW, decoding_seqs=81), state, _policy(n=100))
        assert before.action.kind is StepKind.DECODE
        at_k = step(dataclasses.replace(VIEW, decoding_seqs=80), state, _policy(n=100))
        assert (at_k.action.kind, at_k.state.phase, at_k.action.admit_seqs) == (StepKind.PREFILL, Phase.REFILL, 20)

    def test_refill_returns_to_decode_once_the_target_is_prefilled(self) -> None:
        state = PhaseState(phase=Phase.REFILL, n_seqs=100, refill_target_seqs=20, decoding_at_phase_start=80)
        midway = step(dataclasses.replace(VIEW, decoding_seqs=90, prefilling_seqs=5), state, _policy(n=100))
        assert (midway.action.kind, midway.action.admit_seqs) == (StepKind.PREFILL, 5)
        done = step(dataclasses.replace(VIEW, decoding_seqs=100), state, _policy(n=100))
        assert (done.action.kind, done.state.phase) == (StepKind.DECODE, Phase.DECODE)

    def test_light_load_refills_by_ratio_not_by_k(self) -> None:
        """fillable (N - k) >= n k: 3 waiting with 10 decoding refill since 3 * 80 >= 10 * 20."""
        state = PhaseState(phase=Phase.DECODE, n_seqs=100, last_n_update_s=1.0)
        result = step(dataclasses.replace(VIEW, waiting_seqs=3, decoding_seqs=10), state, _policy(n=100))
        assert (result.action.kind, result.state.refill_target_seqs) == (StepKind.PREFILL, 3)
        fewer = step(dataclasses.replace(VIEW, waiting_seqs=2, decoding_seqs=10), state, _policy(n=100))
        assert fewer.action.kind is StepKind.DECODE

    def test_empty_decode_set_with_waiting_requests_resets_to_initial_prefill(self) -> None:
        state = PhaseState(phase=Phase.DECODE, n_seqs=40)
        result = step(VIEW, state, _policy(n=100))
        assert (result.state.phase, result.action.n_seqs) == (Phase.INITIAL_PREFILL, 100)

    def test_n_recovers_to_the_pushed_cap_under_a_long_queue_after_the_cooldown(self) -> None:
        state = PhaseState(phase=Phase.DECODE, n_seqs=40, last_n_update_s=0.0)
        too_soon = step(dataclasses.replace(VIEW, decoding_seqs=40, now_s=1.5), state, _policy(n=100))
        assert too_soon.action.n_seqs == 40
        later = step(dataclasses.replace(VIEW, decoding_seqs=40, now_s=2.5), state, _policy(n=100))
        assert later.action.n_seqs == 100


class TestKvGate:
    def test_gate_fraction_is_clipped_to_the_pushed_bounds(self) -> None:
        gate = KvGate()
        assert kv_gate_fraction(gate=gate, n_seqs=1, mu_o_tokens=1.0, view=VIEW) == 0.05
        assert kv_gate_fraction(gate=gate, n_seqs=10_000, mu_o_tokens=10_000.0, view=VIEW) == 0.6
        middle = kv_gate_fraction(gate=gate, n_seqs=1000, mu_o_tokens=640.0, view=VIEW)
        assert middle == pytest.approx(1000 * 640 * 0.5 / (16 * 100_000))

    def test_low_free_kv_defers_the_refill(self) -> None:
        state = PhaseState(phase=Phase.DECODE, n_seqs=100, last_n_update_s=1.0)
        short = dataclasses.replace(VIEW, decoding_seqs=80, kv_free_blocks=4_000)
        assert step(short, state, _policy(n=100)).action.kind is StepKind.DECODE

    def test_kv_shortage_during_refill_preempts_pending_prefills(self) -> None:
        state = PhaseState(phase=Phase.REFILL, n_seqs=100, refill_target_seqs=20, decoding_at_phase_start=80)
        view = dataclasses.replace(VIEW, decoding_seqs=85, prefilling_seqs=3, kv_free_blocks=1_000)
        result = step(view, state, _policy(n=100))
        assert (result.action.kind, result.action.preempt_prefills) == (StepKind.DECODE, True)

    def test_kv_escape_in_initial_prefill_shrinks_n_and_starts_decoding(self) -> None:
        state = PhaseState(phase=Phase.INITIAL_PREFILL, n_seqs=100)
        view = dataclasses.replace(VIEW, decoding_seqs=30, prefilling_seqs=2, kv_free_blocks=1_000)
        result = step(view, state, _policy(n=100))
        assert (result.action.kind, result.action.n_seqs, result.action.preempt_prefills) == (StepKind.DECODE, 30, True)


class TestEngineView:
    def test_negative_count_is_refused(self) -> None:
        with pytest.raises(InvalidInputError, match="waiting_seqs"):
            dataclasses.replace(VIEW, waiting_seqs=-1)
