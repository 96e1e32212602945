"""The scaler's loop (services/scaler/service.py): plan to connector, advisory mode, failures, provenance."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from schemas.scaling import ScalerConfig
from services.testing.models import changed
from services.testing.plans import fleetopt_plan
from tests.unit.scaler.rig import Rig, scaler_config


class TestScalerService:
    def test_a_plan_resizes_each_pool_through_its_connector_within_the_step_limit(self) -> None:
        rig = Rig(scaler_config())
        rig.push(short_gpus=10, long_gpus=2, version=7)
        actions = rig.at(1000.0)
        assert [(a.pool, a.from_replicas, a.to_replicas, a.desired_replicas) for a in actions] == [
            ("long", 1, 2, 2),
            ("short", 1, 3, 5),
        ]
        assert rig.connectors["short"].calls == [3]
        assert {a.plan_version for a in actions} == {7}
        assert {(a.result, a.mode, a.reason) for a in actions} == {("applied", "act", "scale_up")}

    def test_each_action_says_where_it_came_from(self) -> None:
        rig = Rig(scaler_config())
        rig.push(short_gpus=4, long_gpus=1, version=3)
        (action,) = rig.at(1000.0)
        assert action.model_dump(exclude={"event_id"}) == {
            "schema_version": 1,
            "event_type": "scaler.action",
            "ts": 1000.0,
            "deployment": "test",
            "scaler_id": "scaler-0",
            "seq": 0,
            "pool": "short",
            "connector": "memory",
            "target": "memory/short",
            "from_replicas": 1,
            "to_replicas": 2,
            "desired_replicas": 2,
            "gpus_per_replica": 2,
            "plan_version": 3,
            "plan_computed_at": 1000.0,
            "reason": "scale_up",
            "pinned": False,
            "mode": "act",
            "result": "applied",
            "detail": None,
            "plan_gpus": 4,
            "limits": {
                "min_replicas": 1,
                "max_replicas": 6,
                "max_step_replicas": 2,
                "cooldown_s": 30.0,
                "scale_down_hold_s": 120.0,
                "pinned_replicas": None,
            },
            "previous_change_ts": None,
            "down_since_ts": None,
            "down_peak_replicas": None,
        }
        assert rig.sink.actions == [action]

    def test_advisory_mode_records_every_action_and_calls_no_connector(self) -> None:
        rig = Rig(scaler_config(mode="advisory"))
        rig.push(short_gpus=12, long_gpus=3, version=1)
        recorded = rig.at(1000.0) + rig.at(1030.0) + rig.at(1060.0)
        assert [(a.pool, a.to_replicas) for a in recorded] == [
            ("long", 2),
            ("short", 3),
            ("long", 3),
            ("short", 5),
            ("short", 6),
        ]
        assert {a.result for a in recorded} == {"advisory"}
        assert rig.connectors["short"].calls == rig.connectors["long"].calls == []
        assert rig.connectors["short"].replicas() == 1
        assert rig.sink.actions == recorded

    def test_an_expired_plan_leaves_the_pools_alone(self) -> None:
        rig = Rig(scaler_config())
        rig.plans.put(fleetopt_plan(short_gpus=12, long_gpus=4, version=1, computed_at=0.0, valid_s=60.0))
        assert rig.at(1000.0) == []
        assert rig.connectors["short"].calls == []

    def test_a_new_plan_is_followed_and_an_oscillating_one_does_not_flap(self) -> None:
        rig = Rig(scaler_config(max_step_replicas=6, cooldown_s=0.0))
        recorded = []
        for minute in range(30):
            rig.push(short_gpus=(4, 10)[minute % 2], long_gpus=1, version=minute + 1)
            recorded += rig.at(1000.0 + 60.0 * minute)
        assert [(a.from_replicas, a.to_replicas) for a in recorded if a.pool == "short"] == [(1, 2), (2, 5)]

    def test_a_failed_connector_is_recorded_and_retried_after_the_cool_down(self) -> None:
        rig = Rig(scaler_config(), fail_with="HTTP 403 Forbidden")
        rig.push(short_gpus=4, long_gpus=1, version=1)
        first = rig.at(1000.0)
        assert [(a.result, a.detail, a.from_replicas, a.to_replicas) for a in first] == [
            ("failed", "HTTP 403 Forbidden", 1, 2)
        ]
        assert rig.at(1010.0) == []
        assert [a.result for a in rig.at(1030.0)] == ["failed"]
        assert rig.service.counters().failed == 2

    def test_a_pin_in_the_config_holds_against_the_plan(self) -> None:
        rig = Rig(scaler_config(pinned_replicas=4, max_step_replicas=6), short=2)
        rig.push(short_gpus=1, long_gpus=1, version=1)
        (action,) = rig.at(1000.0)
        assert (action.to_replicas, action.pinned) == (4, True)
        rig.push(short_gpus=12, long_gpus=1, version=2)
        assert rig.at(2000.0) == []
        assert rig.connectors["short"].replicas() == 4

    def test_a_count_changed_outside_the_scaler_is_read_back_before_deciding(self) -> None:
        rig = Rig(scaler_config(max_step_replicas=6, cooldown_s=0.0))
        rig.push(short_gpus=4, long_gpus=1, version=1)
        rig.at(1000.0)
        rig.connectors["short"].scale(9)
        (action,) = rig.at(1001.0)
        assert (action.from_replicas, action.to_replicas, action.reason) == (9, 3, "out_of_bounds")

    def test_metrics_export_each_pools_count_and_the_actions(self) -> None:
        rig = Rig(scaler_config())
        rig.push(short_gpus=4, long_gpus=1, version=5)
        rig.at(1000.0)
        text = generate_latest(rig.metrics.registry).decode()
        assert 'governor_scaler_replicas{deployment="test",pool="short",service="scaler"} 2.0' in text
        assert 'governor_scaler_plan_version{deployment="test",pool="short",service="scaler"} 5.0' in text
        assert (
            'governor_scaler_actions_total{deployment="test",pool="short",reason="scale_up",result="applied",'
            'service="scaler"} 1.0' in text
        )


class TestRun:
    def test_run_passes_until_idle_and_counts(self) -> None:
        rig = Rig(changed(scaler_config(), interval_s=0.01))
        rig.push(short_gpus=4, long_gpus=1, version=1)
        counters = rig.service.run(idle_exit_s=0.0)
        assert (counters.passes, counters.actions, counters.failed, counters.unrecorded) == (1, 1, 0, 0)

    def test_stop_ends_run_after_the_current_pass(self) -> None:
        rig = Rig(scaler_config())
        rig.service.stop()
        assert rig.service.run().passes == 0


class TestResume:
    def test_a_restarted_scaler_keeps_the_cool_down_and_the_sequence(self) -> None:
        first = Rig(scaler_config(max_step_replicas=6))
        first.push(short_gpus=4, long_gpus=1, version=1)
        logged = first.at(1000.0)
        second = Rig(scaler_config(max_step_replicas=6), short=2)
        assert second.service.resume(logged) == 1
        second.push(short_gpus=10, long_gpus=1, version=2)
        assert second.at(1010.0) == []
        (action,) = second.at(1030.0)
        assert (action.seq, action.from_replicas, action.to_replicas) == (1, 2, 5)

    def test_another_scalers_actions_are_left_alone(self) -> None:
        first = Rig(scaler_config())
        first.push(short_gpus=4, long_gpus=1, version=1)
        logged = [changed(a, scaler_id="other") for a in first.at(1000.0)]
        assert Rig(scaler_config()).service.resume(logged) == 0


class TestPlanClock:
    def test_time_is_the_newest_plans_so_holds_count_in_plan_time(self) -> None:
        """On the plan clock, plans from a simulated fleet (t near 0) are followed and the hold runs in their time."""
        config = changed(scaler_config(max_step_replicas=6, cooldown_s=0.0), clock="plan")
        rig = Rig(config, short=3)
        rig.clock.now_s = 1e9
        recorded = []
        for minute in range(5):
            rig.plans.put(fleetopt_plan(short_gpus=2, long_gpus=1, version=minute + 1, computed_at=60.0 * minute))
            recorded += rig.service.step()
        assert [(a.ts, a.from_replicas, a.to_replicas, a.plan_version) for a in recorded] == [(120.0, 3, 1, 3)]


class TestScalerConfig:
    def test_a_kubernetes_pool_must_name_its_workload(self) -> None:
        with pytest.raises(ValueError, match=r"connector 'kubernetes' needs a \[pools.<name>.kubernetes\] table"):
            ScalerConfig.model_validate({"pools": {"short": {"max_replicas": 2, "connector": "kubernetes"}}})
