"""What the scaler did to each pool, read from ``gov.scaling``: the pools' table of ``governor status``."""

from __future__ import annotations

from dataclasses import dataclass

from schemas.errors import InvalidInputError
from schemas.scaling import ScalingAction
from services.kafka_security import PLAINTEXT
from services.scaler.actions import read_actions
from services.settings import KafkaSecurity


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolStatus:
    """One pool as its last scaling action left it, and how many actions it has had.

    ``replicas`` is the count the last action set (or, advisory, would have set); ``result`` says which.
    """

    pool: str
    replicas: int
    desired_replicas: int | None
    reason: str
    result: str
    mode: str
    plan_version: int | None
    ts: float
    target: str | None
    actions: int
    failed: int


def pool_statuses(actions: list[ScalingAction]) -> list[PoolStatus]:
    """Each pool's last action and counts, sorted by pool, from ``actions`` in log order."""
    last: dict[str, ScalingAction] = {}
    counts: dict[str, int] = {}
    failed: dict[str, int] = {}
    for action in actions:
        last[action.pool] = action
        counts[action.pool] = counts.get(action.pool, 0) + 1
        failed[action.pool] = failed.get(action.pool, 0) + (action.result == "failed")
    return [
        PoolStatus(
            pool=pool,
            replicas=action.from_replicas if action.result == "failed" else action.to_replicas,
            desired_replicas=action.desired_replicas,
            reason=action.reason,
            result=action.result,
            mode=action.mode,
            plan_version=action.plan_version,
            ts=action.ts,
            target=action.target,
            actions=counts[pool],
            failed=failed[pool],
        )
        for pool, action in sorted(last.items())
    ]


def collect_pool_status(
    bootstrap: str, deployment: str, *, timeout_s: float, security: KafkaSecurity = PLAINTEXT
) -> list[PoolStatus]:
    """The deployment's pools from ``gov.scaling``; none where no scaler ever ran against this broker.

    Raises:
        BackendUnavailableError: no broker answers.
    """
    try:
        actions = read_actions(bootstrap, deployment, timeout_s=timeout_s, security=security)
    except InvalidInputError:
        return []
    return pool_statuses(actions)
