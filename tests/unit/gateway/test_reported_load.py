"""A rank's step telemetry reconciled with the gateway's own requests: what other clients run there counts."""

from __future__ import annotations

from services.gateway.reported_load import REPORT_VALID_S, ExternalLoad, ReportedLoad
from tests.unit.gateway.steps import step


class TestReconcile:
    def test_only_the_gateways_requests_leave_no_external_load(self) -> None:
        load = ReportedLoad()
        load.sent("q1", 10.0)
        load.sent("q2", 10.5)
        load.reconcile(step(11.0, running=2, kv_blocks=20))
        assert load.external_at(11.1) == ExternalLoad()

    def test_requests_beyond_the_gateways_count_as_the_steps_mean_context(self) -> None:
        """4 running with 40 blocks of 16 tokens: 160 tokens each; the gateway sent 1, so 3 are external,
        and a waiting one too (4 in all)."""
        load = ReportedLoad()
        load.sent("q1", 10.0)
        load.reconcile(step(11.0, running=4, waiting=1, kv_blocks=40))
        assert load.external_at(11.0) == ExternalLoad(requests=4, tokens=640)

    def test_a_request_the_gateway_saw_finish_after_the_step_still_counts_as_its_own_at_that_step(self) -> None:
        """The step arrives after the gateway read the request's last chunk: no external load is invented."""
        load = ReportedLoad()
        load.sent("q1", 10.0)
        load.finished_at("q1", 11.5)
        load.reconcile(step(11.0, running=1, kv_blocks=5))
        assert load.external_at(11.6).requests == 0

    def test_a_request_sent_after_the_step_is_not_counted_at_that_step(self) -> None:
        load = ReportedLoad()
        load.sent("q1", 12.0)
        load.reconcile(step(11.0, running=1, kv_blocks=5))
        assert load.external_at(12.0).requests == 1

    def test_a_step_older_than_the_last_one_taken_is_ignored(self) -> None:
        load = ReportedLoad()
        load.reconcile(step(11.0, running=3, kv_blocks=3, seq=2))
        load.reconcile(step(10.0, running=0, seq=1))
        assert load.external_at(11.0).requests == 3

    def test_the_figure_lapses_without_a_newer_step(self) -> None:
        """An idle engine sends no steps: its last external load must not stay for good."""
        load = ReportedLoad()
        load.reconcile(step(11.0, running=2, kv_blocks=4))
        assert load.external_at(11.0 + REPORT_VALID_S).requests == 2
        assert load.external_at(11.0 + REPORT_VALID_S + 0.1) == ExternalLoad()

    def test_finished_requests_are_forgotten_after_the_validity(self) -> None:
        load = ReportedLoad()
        for n in range(3):
            load.sent(f"q{n}", 1.0)
            load.finished_at(f"q{n}", 2.0)
        load.sent("q9", 20.0)
        load.finished_at("q9", 21.0)
        assert len(load.finished) == 1
