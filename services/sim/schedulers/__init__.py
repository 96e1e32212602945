"""Simulator schedulers: the interface engines call each iteration and the papers' baselines."""

from services.sim.schedulers.base import BatchPlan, EngineView, Scheduler
from services.sim.schedulers.baselines import MixedChunkedScheduler, SarathiScheduler, pack_decode_first
from services.sim.schedulers.slai import (
    SarathiServeScheduler,
    SlaiScheduler,
    VllmPrefillFirstScheduler,
    safe_default_payload,
)

__all__ = [
    "BatchPlan",
    "EngineView",
    "MixedChunkedScheduler",
    "SarathiScheduler",
    "SarathiServeScheduler",
    "Scheduler",
    "SlaiScheduler",
    "VllmPrefillFirstScheduler",
    "pack_decode_first",
    "safe_default_payload",
]
