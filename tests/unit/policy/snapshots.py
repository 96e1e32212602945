"""Admission snapshots of a real folded summary, with the engine's registration changed as a test needs."""

from __future__ import annotations

from schemas.estimates import LastStep
from schemas.policy_docs.base import SourceOffset
from schemas.records import EstimateSnapshot
from services.testing.models import changed
from tests.fixtures import synthetic_engine_summary


def registered_admission_snapshot(scope: str, **registered: str) -> EstimateSnapshot:
    """An admission snapshot of a real folded summary with a busy queue and the registration's fields changed."""
    summary = synthetic_engine_summary()
    assert summary.engine is not None
    busy = LastStep(running_requests=20, waiting_requests=4, kv_use_frac=0.5, kv_capacity_tokens=1_000_000)
    return EstimateSnapshot(
        deployment="dep",
        scope=scope,
        snapshot_id=f"sha256:{scope}",
        version=1,
        ts=10.0,
        trigger="admission:every 5s",
        offsets=[SourceOffset(topic="t", partition=0, offset=1)],
        estimates=changed(
            summary,
            engine=changed(summary.engine, **registered),
            last_step=busy,
            arrival_rate_short_per_s=2.0,
            completion_rate_short_per_s=2.0,
        ),
    )
