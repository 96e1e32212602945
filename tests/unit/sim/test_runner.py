"""Scenarios and runners: overrides, bit-for-bit offline runs, live pacing on a fake clock, recording."""

from __future__ import annotations

from pathlib import Path

import pytest

from schemas.errors import InvalidInputError
from schemas.events import encode_event, parse_event
from services.replay.files import write_events
from services.sdk.protocol import ListSink, StaticPolicySource
from services.sim.plots import write_plots
from services.sim.runner import run_live, run_offline
from services.sim.scenario import list_scenarios, load_scenario
from services.sim.simulation import ProgressSample


class FakeClock:
    """A monotonic clock that only moves when slept on."""

    def __init__(self) -> None:
        self.now_s = 100.0
        self.slept_s = 0.0

    def monotonic_s(self) -> float:
        return self.now_s

    def sleep(self, seconds: float) -> None:
        self.now_s += seconds
        self.slept_s += seconds


class TestScenarios:
    def test_every_shipped_scenario_loads(self) -> None:
        names = list_scenarios()
        assert {"smoke", "demo", "fleet-8", "mb-saturated-h200", "dp-fcfs", "pools-azure"} <= set(names)
        for name in names:
            assert load_scenario(name).engines

    def test_overrides_replace_duration_seed_and_scale_rates(self) -> None:
        scenario = load_scenario("demo", duration_s=5.0, seed=99, rate_per_s=5.0)
        assert (scenario.duration_s, scenario.seed) == (5.0, 99)
        rates = [phase.arrivals.rate_per_s for phase in scenario.workload.phases]  # type: ignore[attr-defined]
        assert rates == pytest.approx([5.0, 5.0 * 130.0 / 40.0])  # demo: 40 then 130 req/s, scaled to start at 5

    def test_unknown_scenario_names_the_known_ones(self) -> None:
        with pytest.raises(InvalidInputError, match="unknown scenario 'nope'; known: smoke, demo"):
            load_scenario("nope")


class TestRunOffline:
    def test_offline_run_is_reproducible_bit_for_bit_and_seed_sensitive(self) -> None:
        streams = []
        for seed in (1, 1, 2):
            sink = ListSink()
            run_offline(
                load_scenario("smoke", duration_s=3.0, seed=seed), sink=sink, policy_source=StaticPolicySource()
            )
            streams.append(b"".join(encode_event(e) for e in sink.events))
        assert streams[0] == streams[1]
        assert streams[0] != streams[2]

    def test_summary_accounts_for_every_arrival_and_plots_are_written(self, tmp_path: Path) -> None:
        summary = run_offline(
            load_scenario("pools-azure", duration_s=5.0), sink=ListSink(), policy_source=StaticPolicySource()
        )
        assert summary.arrived == summary.finished + summary.rejected + summary.in_flight
        assert summary.finished > 0
        assert len(summary.timeline) == 5
        paths = write_plots(summary, tmp_path)
        assert [p.name for p in paths] == ["timeline.png", "latency.png"]
        assert all(p.read_bytes()[:4] == b"\x89PNG" for p in paths)


class TestRunLive:
    def test_live_run_paces_event_time_by_speed_and_reports_each_second(self) -> None:
        clock = FakeClock()
        samples: list[ProgressSample] = []
        scenario = load_scenario("smoke", duration_s=3.0)
        run_live(
            scenario,
            sink=ListSink(),
            policy_source=StaticPolicySource(),
            speed=10.0,
            clock=clock,
            progress=samples.append,
        )
        assert [s.now_s for s in samples] == [1.0, 2.0, 3.0]
        assert clock.now_s - 100.0 == pytest.approx(0.3, abs=1e-9)
        offline = ListSink()
        run_offline(scenario, sink=offline, policy_source=StaticPolicySource())
        assert samples[-1].finished == sum(1 for e in offline.events if e.event_type == "request.finished")

    def test_progress_shows_each_engine_with_the_slai_delta_in_effect_and_dp_imbalance(self) -> None:
        """The demo fleet's samples carry one entry per engine; only SLAI engines have a delta, only DP has no KV."""
        samples: list[ProgressSample] = []
        run_live(
            load_scenario("demo", duration_s=2.0),
            sink=ListSink(),
            policy_source=StaticPolicySource(),
            speed=1e6,
            clock=FakeClock(),
            progress=samples.append,
        )
        last = samples[-1]
        engines = {e.engine_id: e for e in last.engines}
        assert sorted(engines) == ["dp-0", "h200-0", "h200-1", "rtx-0", "rtx-1", "slai-0", "slai-1"]
        assert sum(e.running_plus_waiting for e in last.engines) == last.running_plus_waiting
        assert [engines[e].slai_delta for e in ("slai-0", "slai-1")] == [5.0, 5.0]  # safe default: 5 below 96% KV
        assert all(engines[e].slai_delta is None for e in ("h200-0", "rtx-0", "dp-0"))
        assert engines["dp-0"].kv_use_frac is None
        assert all(0.0 < (engines[e].kv_use_frac or 0.0) < 0.96 for e in ("slai-0", "slai-1"))
        assert last.dp_imbalance_tokens is not None
        assert last.dp_imbalance_tokens >= 0.0
        assert last.dp_barrier_idle_frac is not None
        assert 0.0 <= last.dp_barrier_idle_frac < 1.0

    def test_non_positive_speed_is_refused(self) -> None:
        with pytest.raises(InvalidInputError, match="speed must be > 0, got 0"):
            run_live(load_scenario("smoke"), sink=ListSink(), policy_source=StaticPolicySource(), speed=0.0)


class TestRecord:
    def test_recorded_stream_parses_back_identically(self, tmp_path: Path) -> None:
        sink = ListSink()
        run_offline(load_scenario("dp-jsq", duration_s=0.2), sink=sink, policy_source=StaticPolicySource())
        path = tmp_path / "run" / "events.jsonl"
        assert write_events(path, sink.events) == len(sink.events)
        parsed = [parse_event(line) for line in path.read_bytes().splitlines()]
        assert parsed == sink.events
        assert {e.event_type for e in parsed} >= {"rank.step", "step", "request.finished", "engine.registered"}
