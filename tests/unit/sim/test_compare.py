"""services/sim/compare.py: the arms of a comparison, its rows, the verdict and the policy-change recorder."""

from __future__ import annotations

import pytest

from schemas.engines import PolicyApplied
from services.sdk.protocol import ListSink
from services.sim.compare import (
    Arm,
    Comparison,
    Control,
    PolicyChange,
    PolicyChangeRecorder,
    baseline_scenario,
    fleet_gpus,
    run_offline_arm,
)
from services.sim.run_summary import RunSummary, TierSummary
from services.sim.scenario import load_scenario


def _summary(*, finished: int, ttft_p99_s: float, paid_slo: float, free_slo: float) -> RunSummary:
    def tier(name: str, slo_frac: float, tbt_slo_s: float) -> TierSummary:
        return TierSummary(
            tier=name,
            finished=finished // 2,
            ttft_p50_s=0.05,
            ttft_p99_s=ttft_p99_s,
            tbt_p50_s=0.01,
            tbt_p99_s=0.09,
            tbt_slo_s=tbt_slo_s,
            slo_attainment_frac=slo_frac,
        )

    return RunSummary(
        duration_s=10.0,
        arrived=finished,
        finished=finished,
        rejected=0,
        in_flight=0,
        preemptions=0,
        throughput_req_per_s=finished / 10.0,
        throughput_tokens_per_s=1000.0,
        output_tokens_per_s=500.0,
        ttft_p50_s=0.05,
        ttft_p99_s=ttft_p99_s,
        kv_use_mean_frac=0.5,
        kv_use_max_frac=0.9,
        barrier_idle_frac=None,
        avg_imbalance_tokens=None,
        steps=100,
        tiers=(tier("free", free_slo, 0.5), tier("paid", paid_slo, 0.1)),
    )


def _comparison(*, governed_paid_slo: float) -> Comparison:
    scenario = load_scenario("smoke", duration_s=1.0, seed=5)
    ungoverned = Arm(
        name="ungoverned",
        control=Control.NONE,
        summary=_summary(finished=1000, ttft_p99_s=6.13, paid_slo=0.935, free_slo=1.0),
        fleet_gpus=7,
    )
    governed = Arm(
        name="governed",
        control=Control.OFFLINE,
        summary=_summary(finished=1030, ttft_p99_s=4.38, paid_slo=governed_paid_slo, free_slo=1.0),
        fleet_gpus=7,
        planned_gpus=5,
    )
    return Comparison.of(scenario, [ungoverned, governed])


class TestBaselineScenario:
    def test_each_paper_engine_gets_its_papers_baseline(self) -> None:
        scenario = load_scenario("demo", duration_s=1.0)
        baseline = baseline_scenario(scenario)
        assert baseline is not None
        pairs = {(a.config.engine_id, b.scheduler) for a, b in zip(scenario.engines, baseline.engines, strict=True)}
        assert pairs == {
            ("h200-0", "mixed"),
            ("h200-1", "mixed"),
            ("rtx-0", "mixed"),
            ("rtx-1", "mixed"),
            ("slai-0", "sarathi"),
            ("slai-1", "sarathi"),
            ("dp-0", "jsq-load"),
        }
        assert baseline.workload is scenario.workload
        assert baseline.seed == scenario.seed

    def test_a_fleet_without_paper_policies_has_no_baseline_arm(self) -> None:
        assert baseline_scenario(load_scenario("smoke")) is None

    def test_a_dp_deployment_counts_one_gpu_per_rank(self) -> None:
        assert fleet_gpus(load_scenario("demo")) == 2 + 2 + 2 + 4


class TestPolicyChangeRecorder:
    def test_applied_versions_are_kept_and_every_event_passes_on(self) -> None:
        sink = ListSink()
        recorder = PolicyChangeRecorder(sink)
        applied = PolicyApplied(
            event_id="e1", ts=3.5, deployment="d", engine_id="rtx-0", seq=1, kind="ebplus", scope="rtx-0", version=4
        )
        refused = PolicyApplied(
            event_id="e2",
            ts=3.6,
            deployment="d",
            engine_id="rtx-0",
            seq=2,
            kind="ebplus",
            scope="rtx-0",
            version=5,
            applied=False,
            reason="stale",
        )
        recorder.publish(applied)
        recorder.publish(refused)
        assert recorder.changes == [PolicyChange(t_s=3.5, engine_id="rtx-0", kind="ebplus", version=4)]
        assert sink.events == [applied, refused]


class TestOfflineArms:
    def test_governed_engines_apply_policies_and_ungoverned_ones_apply_none(self) -> None:
        scenario = load_scenario("demo", duration_s=3.0, seed=2)
        ungoverned = run_offline_arm(scenario, name="ungoverned", control=Control.NONE, fleet_slot_s=10.0)
        governed = run_offline_arm(scenario, name="governed", control=Control.OFFLINE, fleet_slot_s=10.0)
        assert ungoverned.policy_changes == ()
        assert {change.kind for change in governed.policy_changes} >= {"bfio", "slai"}
        assert ungoverned.summary.arrived == governed.summary.arrived

    def test_a_live_arm_is_refused_offline(self) -> None:
        with pytest.raises(ValueError, match="live arm"):
            run_offline_arm(load_scenario("smoke", duration_s=1.0), name="x", control=Control.LIVE, fleet_slot_s=10.0)


class TestComparison:
    def test_a_tier_more_than_one_point_worse_is_named_in_the_verdict(self) -> None:
        comparison = _comparison(governed_paid_slo=0.898)
        assert comparison.worse_tiers() == ("paid",)
        verdict = comparison.verdict()
        assert verdict.startswith("Governing bought on this run (seed 5, governed vs ungoverned): throughput +3.0%")
        assert "TTFT p99 -28.5% (4.38 s vs 6.13 s)" in verdict
        assert "paid 89.8% vs 93.5%" in verdict
        assert verdict.endswith("; worse under control: paid")

    def test_a_tier_within_one_point_is_not_worse(self) -> None:
        comparison = _comparison(governed_paid_slo=0.93)
        assert comparison.worse_tiers() == ()
        assert comparison.verdict().endswith("; no tier worse off")

    def test_table_has_a_column_per_arm_and_the_deltas(self) -> None:
        table = _comparison(governed_paid_slo=0.898).table().splitlines()
        assert table[0].split() == ["metric", "ungoverned", "governed", "vs", "ungoverned"]
        paid = next(line for line in table if line.startswith("SLO attainment paid"))
        assert paid.split()[-4:] == ["93.5%", "89.8%", "-3.7", "pp"]
        gpus = next(line for line in table if line.startswith("FleetOpt plan GPUs"))
        assert gpus.split()[-3:] == ["-", "5", "-"]

    def test_json_rows_carry_every_arms_value(self) -> None:
        body = _comparison(governed_paid_slo=0.898).to_dict()
        rows = body["rows"]
        assert isinstance(rows, list)
        finished = next(row for row in rows if row["metric"] == "finished")
        assert (finished["ungoverned"], finished["governed"], finished["better"]) == (1000.0, 1030.0, "higher")
        assert body["worse_tiers"] == ["paid"]

    def test_a_comparison_needs_both_arms(self) -> None:
        scenario = load_scenario("smoke", duration_s=1.0)
        arm = Arm(
            name="governed",
            control=Control.OFFLINE,
            summary=_summary(finished=1, ttft_p99_s=1.0, paid_slo=1.0, free_slo=1.0),
            fleet_gpus=1,
        )
        with pytest.raises(ValueError, match="ungoverned and a governed arm"):
            Comparison.of(scenario, [arm])
