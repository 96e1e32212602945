"""Recorded simulator streams used as fixtures: the simulator's own telemetry, recorded to a file and read back."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from schemas.events import Event
from services.replay.files import read_events, write_events
from services.sdk.protocol import ListSink, StaticPolicySource
from services.sim import load_scenario, run_offline


def recorded_sim_stream(
    path: Path, *, scenario: str = "demo", duration_s: float = 40.0, seed: int = 7, deployment: str = "sim"
) -> list[Event]:
    """Run ``scenario`` offline (no control plane), record its events to ``path`` and return them as read back."""
    built = replace(load_scenario(scenario, duration_s=duration_s, seed=seed), deployment=deployment)
    sink = ListSink()
    run_offline(built, sink=sink, policy_source=StaticPolicySource())
    write_events(path, sink.events)
    return list(read_events(path))
