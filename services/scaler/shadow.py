"""What a shadow policy configuration's FleetOpt plans would have done to the pools.

A shadow configuration's decisions are recorded on ``gov.policy.decisions`` and never written where
the scaler reads (docs/operations.md, shadow policies). To show what they would do to capacity, its
FleetOpt documents are replayed, in log order, through the scaler itself: a ``ScalerService`` in
advisory mode on the plan clock, with the operator's pools and limits, whose pools start where the
configuration says. The live configuration's documents are replayed the same way, so the two traces
(actions, replicas over time, GPU-seconds) compare like for like. Nothing is resized and nothing is
published: the actions are returned.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from schemas.policy_docs.fleetopt import FleetoptPolicy
from schemas.scaling import ScalerConfig, ScalingAction
from services.health import ServiceMetrics
from services.scaler.actions import ListActionSink
from services.scaler.connector import MemoryConnector
from services.scaler.service import ScalerMetrics, ScalerService
from services.sdk.protocol import StaticPolicySource

SHADOW_SCALER_PREFIX = "shadow-"


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayedTrace:
    """The actions the plans would have caused, each pool's replicas after the last plan, and its GPU-seconds.

    GPU-seconds count from the first plan to the last, each interval at the replicas held through it.
    """

    actions: list[ScalingAction]
    plans: int
    final_replicas: dict[str, int]
    gpu_seconds: dict[str, float]


def replay_plans(
    config: ScalerConfig, deployment: str, documents: Iterable[FleetoptPolicy], *, scaler_id: str
) -> ReplayedTrace:
    """Run ``documents`` (log order) through an advisory scaler on the plan clock; return its trace.

    Each document is one pass at its ``computed_at``, as the scaler on the plan clock would run it;
    cool-downs, holds and step limits count in that time. A pool starts at its ``initial_replicas``,
    else its minimum.
    """
    advisory = ScalerConfig.model_validate({**config.model_dump(), "mode": "advisory", "clock": "plan"})
    plans = StaticPolicySource()
    connectors = {
        name: MemoryConnector(name, pool.initial_replicas if pool.initial_replicas is not None else pool.min_replicas)
        for name, pool in config.pools.items()
    }
    sink = ListActionSink()
    scaler = ScalerService(
        config=advisory,
        deployment=deployment,
        scaler_id=scaler_id,
        plans=plans,
        connectors=connectors,
        sink=sink,
        metrics=ScalerMetrics(ServiceMetrics("scaler", deployment)),
    )
    gpu_seconds = dict.fromkeys(config.pools, 0.0)
    previous_ts: float | None = None
    count = 0
    for document in documents:
        if previous_ts is not None:
            held = max(0.0, document.computed_at - previous_ts)
            for name, replicas in scaler.replicas().items():
                gpu_seconds[name] += held * replicas * config.pools[name].gpus_per_replica
        plans.put(document)
        scaler.step()
        previous_ts = document.computed_at
        count += 1
    return ReplayedTrace(actions=sink.actions, plans=count, final_replicas=scaler.replicas(), gpu_seconds=gpu_seconds)
