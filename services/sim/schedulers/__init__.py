"""Simulator schedulers: the interface engines call each iteration, the papers' baselines and EB(k)/EB+."""

from services.sim.schedulers.base import BatchPlan, EngineView, Scheduler
from services.sim.schedulers.baselines import MixedChunkedScheduler, SarathiScheduler, pack_decode_first
from services.sim.schedulers.ebplus import EbplusScheduler, FixedEbScheduler

__all__ = [
    "BatchPlan",
    "EbplusScheduler",
    "EngineView",
    "FixedEbScheduler",
    "MixedChunkedScheduler",
    "SarathiScheduler",
    "Scheduler",
    "pack_decode_first",
]
