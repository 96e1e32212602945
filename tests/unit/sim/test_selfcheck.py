"""The simulated engine's self-check judge: both decisions of a step judged once the requests' progress is known."""

from __future__ import annotations

import numpy as np
import pytest

from services.sim.request import RequestSpec, SimRequest
from services.sim.selfcheck import ShadowJudge, StepDecisions


def _request(name: str, prompt: int) -> SimRequest:
    return SimRequest(RequestSpec(request_id=name, arrival_s=0.0, prompt_tokens=prompt, output_tokens=1000))


def _decisions(a: SimRequest, b: SimRequest, c: SimRequest, *, applied: int, shadow: int) -> StepDecisions:
    return StepDecisions(
        step_id=0,
        ranks=[[a], [b]],
        waiting=[c],
        applied_rank_of=np.array([applied]),
        shadow_rank_of=np.array([shadow]),
        lookahead_applied=True,
        horizon_steps=2,
        offsets_steps=np.arange(3.0),
        weights=np.ones(3),
    )


def _advance(requests: list[SimRequest]) -> None:
    for request in requests:
        request.generated_tokens += 1


class TestShadowJudge:
    def test_both_decisions_are_judged_by_realised_lengths_after_the_horizon(self) -> None:
        """Rank 0 holds A (10 tokens, finishes after one step), rank 1 holds B (10 tokens); C (5 tokens) goes to
        rank 1 (applied, the lookahead) or rank 0 (shadow, H = 0). Over offsets 0..2 the loads are
        (10, 15), (0, 17), (0, 19) -> 41 applied and (15, 10), (6, 11), (7, 12) -> 15 shadowed."""
        a, b, c = _request("a", 10), _request("b", 10), _request("c", 5)
        judge = ShadowJudge(num_ranks=2)
        judge.observe(step_id=0, ranks=[[a], [b]], now_s=0.0)
        judge.record(_decisions(a, b, c, applied=1, shadow=0), shadow_compute_s=0.001)
        _advance([a, b, c])
        for step in (1, 2):
            judge.observe(step_id=step, ranks=[[], [b, c]], now_s=0.01 * step)
            assert judge.report(0.01 * step, period_s=0.0) is None
            _advance([b, c])
        judge.observe(step_id=3, ranks=[[], [b, c]], now_s=0.03)
        report = judge.report(0.03, period_s=0.0)
        assert report is not None
        assert report.judged_steps == 1
        assert report.differing_steps == 1
        assert report.lookahead_imbalance_tokens == pytest.approx(41.0)
        assert report.myopic_imbalance_tokens == pytest.approx(15.0)
        assert report.squared_difference_tokens2 == pytest.approx(26.0**2)
        assert report.shadow_compute_s == pytest.approx(0.001)
        assert (report.first_step_id, report.last_step_id, report.lookahead_horizon_steps) == (0, 0, 2)

    def test_a_request_only_the_shadow_placed_is_judged_once_it_has_run_past_the_horizon(self) -> None:
        a, b, c = _request("a", 10), _request("b", 10), _request("c", 5)
        judge = ShadowJudge(num_ranks=2)
        judge.observe(step_id=0, ranks=[[a], [b]], now_s=0.0)
        judge.record(_decisions(a, b, c, applied=-1, shadow=0), shadow_compute_s=0.0)
        _advance([a, b])
        for step in range(1, 6):
            judge.observe(step_id=step, ranks=[[], [b]], now_s=0.01 * step)
            _advance([b])
        assert judge.report(0.06, period_s=0.0) is None
        for step in range(6, 10):
            judge.observe(step_id=step, ranks=[[c], [b]], now_s=0.01 * step)
            _advance([b, c])
        report = judge.report(0.1, period_s=0.0)
        assert report is not None
        assert report.judged_steps == 1
        assert report.myopic_imbalance_tokens == pytest.approx(15.0)

    def test_reports_wait_for_their_period_of_event_time(self) -> None:
        a, b, c = _request("a", 10), _request("b", 10), _request("c", 5)
        judge = ShadowJudge(num_ranks=2)
        judge.observe(step_id=0, ranks=[[a], [b]], now_s=0.0)
        judge.record(_decisions(a, b, c, applied=1, shadow=1), shadow_compute_s=0.0)
        _advance([a, b, c])
        for step in range(1, 4):
            judge.observe(step_id=step, ranks=[[], [b, c]], now_s=0.01 * step)
            _advance([b, c])
        assert judge.report(0.03, period_s=0.25) is None
        report = judge.report(0.25, period_s=0.25)
        assert report is not None
        assert report.differing_steps == 0
        assert report.myopic_imbalance_tokens == report.lookahead_imbalance_tokens
        assert judge.report(0.5, period_s=0.25) is None
