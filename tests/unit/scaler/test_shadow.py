"""A shadow's FleetOpt plans replayed through the advisory scaler, and the documents each side followed."""

from __future__ import annotations

from schemas.policy_docs.fleetopt import FleetoptPolicy
from schemas.records import DecisionRecord
from services.cli.shadow_scaling import fleetopt_documents
from services.scaler.shadow import replay_plans
from services.testing.plans import fleetopt_plan
from tests.unit.scaler.rig import scaler_config

CONFIG = scaler_config(max_replicas=8)


def _record(plan: FleetoptPolicy, *, shadow: str | None = None, accepted: bool = True) -> DecisionRecord:
    return DecisionRecord(
        deployment="test",
        kind="fleetopt",
        scope="fleet",
        version=plan.version,
        accepted=accepted,
        document=plan.model_dump(mode="json"),
        shadow=shadow,
    )


class TestReplayPlans:
    def test_the_plans_move_the_pools_within_the_limits_and_count_gpu_seconds(self) -> None:
        plans = [
            fleetopt_plan(short_gpus=12, long_gpus=1, version=1, computed_at=0.0),
            fleetopt_plan(short_gpus=12, long_gpus=1, version=2, computed_at=60.0),
            fleetopt_plan(short_gpus=12, long_gpus=1, version=3, computed_at=90.0),
        ]
        trace = replay_plans(CONFIG, "test", plans, scaler_id="shadow-b")
        # 6 replicas wanted, 2 at a time: 1 -> 3 at 0 s, 3 -> 5 at 60 s, 5 -> 6 at 90 s (cool-down 30 s).
        assert [(a.ts, a.from_replicas, a.to_replicas) for a in trace.actions] == [
            (0.0, 1, 3),
            (60.0, 3, 5),
            (90.0, 5, 6),
        ]
        assert {(a.mode, a.result, a.scaler_id) for a in trace.actions} == {("advisory", "advisory", "shadow-b")}
        assert trace.final_replicas == {"short": 6, "long": 1}
        assert trace.plans == 3
        # 3 replicas x 2 GPUs for 60 s, then 5 x 2 for 30 s; the long pool's one GPU for 90 s.
        assert trace.gpu_seconds == {"short": 3 * 2 * 60.0 + 5 * 2 * 30.0, "long": 90.0}

    def test_a_dip_shorter_than_the_hold_changes_nothing(self) -> None:
        plans = [
            fleetopt_plan(short_gpus=4, long_gpus=1, version=1, computed_at=0.0),
            fleetopt_plan(short_gpus=2, long_gpus=1, version=2, computed_at=60.0),
            fleetopt_plan(short_gpus=4, long_gpus=1, version=3, computed_at=100.0),
        ]
        trace = replay_plans(CONFIG, "test", plans, scaler_id="shadow-b")
        assert [(a.from_replicas, a.to_replicas) for a in trace.actions] == [(1, 2)]


class TestFleetoptDocuments:
    def test_the_live_side_is_what_was_written_and_the_shadow_side_is_its_own(self) -> None:
        written = fleetopt_plan(short_gpus=4, long_gpus=1, version=1, computed_at=0.0)
        refused = fleetopt_plan(short_gpus=8, long_gpus=1, version=2, computed_at=10.0)
        shadowed = fleetopt_plan(short_gpus=6, long_gpus=1, version=1, computed_at=0.0)
        other = fleetopt_plan(short_gpus=2, long_gpus=1, version=1, computed_at=0.0)
        records = [
            _record(written),
            _record(refused, accepted=False),
            _record(shadowed, shadow="b", accepted=False),
            _record(other, shadow="c", accepted=False),
        ]
        assert fleetopt_documents(records, "fleet", None) == [written]
        assert fleetopt_documents(records, "fleet", "b") == [shadowed]
        assert fleetopt_documents(records, "other-scope", "b") == []
