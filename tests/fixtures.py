"""Recorded simulator streams used as fixtures: the simulator's own telemetry, recorded to a file and read back."""

from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path

from decide.specs import default_registry
from schemas.estimates import EngineSummary
from schemas.events import Event
from schemas.policy_docs.base import SourceOffset
from schemas.records import EstimateSnapshot
from services.replay.files import read_events, write_events
from services.replay.offline import OfflineControlPlane
from services.replay.replay import replay_offline
from services.sdk.protocol import ListSink, StaticPolicySource
from services.sim import load_scenario, run_offline
from services.testing.streams import synthetic_stream


def recorded_sim_stream(
    path: Path, *, scenario: str = "demo", duration_s: float = 40.0, seed: int = 7, deployment: str = "sim"
) -> list[Event]:
    """Run ``scenario`` offline (no control plane), record its events to ``path`` and return them as read back."""
    built = replace(load_scenario(scenario, duration_s=duration_s, seed=seed), deployment=deployment)
    sink = ListSink()
    run_offline(built, sink=sink, policy_source=StaticPolicySource())
    write_events(path, sink.events)
    return list(read_events(path))


DEMO_FLEET_SLOT_S = 5.0


def recorded_demo_plane(path: Path, *, duration_s: float = 20.0) -> OfflineControlPlane:
    """The demo fleet's recorded stream folded and decided by the offline control plane.

    The demo has every kind of engine (EB+ engines with calibrated hardware, SLAI engines with SLO
    tiers, a DP engine under BF-IO), so the plane's snapshots carry real summaries of each kind, and
    a fleet slot of ``DEMO_FLEET_SLOT_S`` closes fleet slots within the run.
    """
    events = recorded_sim_stream(path, duration_s=duration_s)
    return replay_offline(events, default_registry(fleet_slot_s=DEMO_FLEET_SLOT_S))


def last_snapshot(plane: OfflineControlPlane, kind: str, scope: str) -> EstimateSnapshot:
    """The last snapshot the plane took for policy ``kind`` on ``scope`` (an engine id or ``fleet``)."""
    taken = [s for s in plane.snapshots if s.scope == scope and s.trigger.kind == kind]
    assert taken, f"no {kind} snapshot of {scope}"
    return taken[-1]


@functools.cache
def synthetic_engine_summary() -> EngineSummary:
    """A real engine summary without a simulator run: the synthetic stream's last admission snapshot, folded offline.

    Tests that need one particular state copy it with ``model_copy`` (a queue, a registration).
    """
    plane = OfflineControlPlane("dep", default_registry())
    for event in synthetic_stream(engines=1, requests=200):
        plane.publish(event)
    estimates = [s for s in plane.snapshots if s.trigger.kind == "admission"][-1].estimates
    assert isinstance(estimates, EngineSummary)
    return estimates


def admission_snapshot(
    summary: EngineSummary, *, version: int, ts: float, deployment: str = "dep", scope: str = "eng-0"
) -> EstimateSnapshot:
    """An admission-trigger snapshot of ``scope`` carrying ``summary``, numbered ``version`` at event time ``ts``."""
    return EstimateSnapshot(
        deployment=deployment,
        scope=scope,
        snapshot_id=f"sha256:{scope}-{version}",
        version=version,
        ts=ts,
        trigger="admission:every 5s",
        offsets=[SourceOffset(topic="gov.telemetry", partition=0, offset=version)],
        estimates=summary,
    )
