"""BF-IO's self-check reports in the stream fold: windowed sums per engine, by event time, live == replay."""

from __future__ import annotations

import pytest

from decide.specs import default_registry
from decide.wiring.bfio import bfio_inputs
from fold.engine_estimates import EngineEstimates
from fold.folder import Folder
from schemas.engines import EngineRegistered
from schemas.estimates import SelfCheckSummary
from schemas.events import Event
from schemas.names import RecordPosition
from schemas.steps import BfioSelfCheckReport, RankStepReport

ENGINE = "dp-0"


def _envelope(seq: int, ts: float, **extra: object) -> dict[str, object]:
    return {"event_id": f"e{seq}", "ts": ts, "deployment": "dep", "engine_id": ENGINE, "seq": seq, **extra}


def _stream(seconds: int, *, myopic: float = 90.0, lookahead: float = 100.0) -> list[Event]:
    """A 2-rank DP engine stepping every 0.05 s, reporting its self-check every 0.25 s (10 judged steps)."""
    events: list[Event] = [
        EngineRegistered(
            model="m",
            gpu="g",
            hardware_profile=None,
            max_num_seqs=144,
            max_num_batched_tokens=144,
            max_model_len=100_000,
            kv_blocks_total=1000,
            block_size_tokens=16,
            dp_size=2,
            obeys=["bfio"],
            **_envelope(0, 0.0),
        )
    ]
    seq = 0
    for step in range(seconds * 20):
        ts = 0.05 * (step + 1)
        for rank in (0, 1):
            seq += 1
            events.append(
                RankStepReport(
                    step_id=step,
                    load_tokens=1000 + 100 * rank,
                    num_running=70,
                    free_slots=2,
                    local_compute_s=0.01,
                    barrier_wait_s=0.0,
                    **_envelope(seq, ts, dp_rank=rank),
                )
            )
        if step % 5 == 4:
            seq += 1
            events.append(
                BfioSelfCheckReport(
                    first_step_id=max(0, step - 14),
                    last_step_id=step - 5 if step >= 5 else 0,
                    judged_steps=10,
                    differing_steps=8,
                    expired_steps=0,
                    lookahead_horizon_steps=7,
                    lookahead_in_force=True,
                    myopic_imbalance_tokens=myopic,
                    lookahead_imbalance_tokens=lookahead,
                    squared_difference_tokens2=150.0,
                    shadow_compute_s=0.001,
                    **_envelope(seq, ts),
                )
            )
    return events


def _self_check(estimates: EngineEstimates) -> SelfCheckSummary:
    dp = estimates.summary().dp
    assert dp is not None
    assert dp.self_check is not None
    return dp.self_check


class TestSelfCheckFold:
    def test_reports_are_summed_over_the_last_ten_seconds_of_event_time(self) -> None:
        estimates = EngineEstimates(ENGINE)
        for event in _stream(4):
            estimates.fold(event)
        early = _self_check(estimates)
        assert early.judged_steps == 16 * 10
        assert early.myopic_imbalance_tokens == pytest.approx(16 * 90.0)
        assert early.lookahead_imbalance_tokens == pytest.approx(16 * 100.0)
        assert (early.lookahead_horizon_steps, early.lookahead_in_force, early.window_s) == (7, True, 10.0)
        for event in _stream(15)[len(_stream(4)) :]:
            estimates.fold(event)
        late = _self_check(estimates)
        assert late.judged_steps == (9 * 4 + 1) * 10  # slots 6..15: four reports a second, the last at 15.0 s

    def test_the_snapshot_feeds_the_bfio_inputs(self) -> None:
        folder = Folder("dep", default_registry())
        snapshots = [
            s for offset, event in enumerate(_stream(3)) for s in folder.fold(event, RecordPosition("t", 0, offset))
        ]
        inputs = bfio_inputs(snapshots[-1])
        assert inputs is not None
        assert inputs.self_check is not None
        assert inputs.self_check.judged_steps > 0
        assert inputs.self_check.myopic_imbalance_tokens == pytest.approx(
            0.9 * inputs.self_check.lookahead_imbalance_tokens
        )

    def test_a_restored_state_continues_as_the_uninterrupted_fold(self) -> None:
        events = _stream(12)
        whole = Folder("dep", default_registry())
        expected = [s for offset, e in enumerate(events) for s in whole.fold(e, RecordPosition("t", 0, offset))]
        first = Folder("dep", default_registry())
        cut = len(events) // 2
        snapshots = [s for offset, e in enumerate(events[:cut]) for s in first.fold(e, RecordPosition("t", 0, offset))]
        second = Folder("dep", default_registry())
        second.load(ENGINE, first.state_json(ENGINE))
        for offset, event in enumerate(events[cut:], start=cut):
            snapshots.extend(second.fold(event, RecordPosition("t", 0, offset)))
        assert [s.model_dump() for s in snapshots] == [s.model_dump() for s in expected]
        assert whole.summary_json(ENGINE) == second.summary_json(ENGINE)
