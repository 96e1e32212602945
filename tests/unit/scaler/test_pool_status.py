"""The pools' table of ``governor status`` (services/inspection/scaling.py): each pool's last action and counts."""

from __future__ import annotations

from schemas.scaling import ScalingAction
from services.inspection import pool_statuses


def action(seq: int, pool: str, from_replicas: int, to_replicas: int, result: str = "applied") -> ScalingAction:
    return ScalingAction.model_validate(
        {
            "event_id": f"scaler-{seq}",
            "ts": 100.0 + seq,
            "deployment": "test",
            "scaler_id": "scaler",
            "seq": seq,
            "pool": pool,
            "connector": "kubernetes",
            "target": f"Deployment/llm/vllm-{pool}",
            "from_replicas": from_replicas,
            "to_replicas": to_replicas,
            "desired_replicas": 6,
            "gpus_per_replica": 1,
            "plan_version": 3,
            "plan_computed_at": 99.0,
            "reason": "scale_up",
            "pinned": False,
            "mode": "act",
            "result": result,
            "detail": "HTTP 403 Forbidden" if result == "failed" else None,
        }
    )


class TestPoolStatuses:
    def test_each_pool_shows_its_last_action_and_counts(self) -> None:
        statuses = pool_statuses([action(0, "short", 1, 3), action(1, "long", 1, 2), action(2, "short", 3, 5)])
        assert [(s.pool, s.replicas, s.actions, s.failed, s.ts) for s in statuses] == [
            ("long", 2, 1, 0, 101.0),
            ("short", 5, 2, 0, 102.0),
        ]

    def test_a_failed_last_action_leaves_the_count_it_started_from(self) -> None:
        (status,) = pool_statuses([action(0, "short", 1, 3), action(1, "short", 3, 5, result="failed")])
        assert (status.replicas, status.result, status.failed) == (3, "failed", 1)
