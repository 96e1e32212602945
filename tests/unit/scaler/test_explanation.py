"""Explaining a scaling action from its record (services/scaler/explanation.py), on actions the real service wrote."""

from __future__ import annotations

from services.scaler.explanation import explain_action
from services.testing.plans import fleetopt_plan
from tests.unit.scaler.rig import Rig, scaler_config


class TestExplainAction:
    def test_a_step_limited_scale_up_names_the_plan_the_bounds_and_the_step(self) -> None:
        rig = Rig(scaler_config())
        rig.push(short_gpus=10, long_gpus=2, version=7)
        action = next(a for a in rig.at(1000.0) if a.pool == "short")
        lines = explain_action(action, None)
        assert lines[0] == (
            "short: 1 -> 3 replicas at t=1000.000 s, scale_up, applied by memory/short (scaler scaler-0, seq 1)"
        )
        assert (
            "plan       fleetopt fleet v7 computed at t=1000.000 s: short n_gpus=10 = 5 replicas of 2 GPU(s)" in lines
        )
        assert "bounds     [1, 6]: desired 5" in lines
        assert (
            "step       at most 2 per action: moved 2, short of desired 5 (the step limit or the hold's peak)" in lines
        )
        assert "cool-down  30 s: the pool's first change" in lines
        assert "           (its decision is not on gov.policy.decisions)" in lines

    def test_a_held_scale_down_names_the_hold_start_the_peak_and_the_previous_change(self) -> None:
        rig = Rig(scaler_config(), short=5)
        rig.push(short_gpus=2, long_gpus=2, version=1)
        assert [a.pool for a in rig.at(1000.0)] == ["long"]
        rig.push(short_gpus=4, long_gpus=2, version=2)
        assert rig.at(1060.0) == []
        action = rig.at(1120.0)[0]
        lines = explain_action(action, None)
        assert lines[0].startswith("short: 5 -> 3 replicas at t=1120.000 s, scale_down")
        assert "bounds     [1, 6]: desired 2" in lines
        assert (
            "hold       120 s: the plan wanted fewer since t=1000.000 s (120 s); the most it wanted meanwhile: 2"
            in lines
        )
        assert "cool-down  30 s: the pool's first change" in lines

    def test_the_pin_and_the_minimum_are_named_with_the_plan_they_overrode(self) -> None:
        plan = fleetopt_plan(short_gpus=0, long_gpus=0, version=3, computed_at=1000.0)
        pinned = Rig(scaler_config(pinned_replicas=4))
        pinned.plans.put(plan)
        (action,) = pinned.at(1000.0)
        assert "pin        pinned_replicas=4 in the scaler's file: the plan is ignored" in explain_action(action, plan)
        floored = Rig(scaler_config(scale_down_hold_s=0.0), short=3)
        floored.plans.put(plan)
        (action,) = floored.at(1000.0)
        lines = explain_action(action, plan)
        assert "bounds     [1, 6]: desired 1 (0 raised to the minimum)" in lines
        assert "plan       fleetopt fleet v3 computed at t=1000.000 s: short n_gpus=0 = 0 replicas of 2 GPU(s)" in lines
        assert "           valid until t=1600.000 s; previous version -; inputs snapshot plan-3" in lines

    def test_a_failure_is_shown(self) -> None:
        rig = Rig(scaler_config(), fail_with="HTTP 403 Forbidden")
        rig.push(short_gpus=4, long_gpus=2, version=1)
        failed = next(a for a in rig.at(1000.0) if a.pool == "short")
        lines = explain_action(failed, None)
        assert "FAILED on memory/short" in lines[0]
        assert lines[-1] == "error      HTTP 403 Forbidden"
