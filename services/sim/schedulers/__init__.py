"""Simulator schedulers: the interface engines call each iteration and the papers' baselines."""

from services.sim.schedulers.base import BatchPlan, EngineView, Scheduler
from services.sim.schedulers.baselines import MixedChunkedScheduler, SarathiScheduler, pack_decode_first

__all__ = ["BatchPlan", "EngineView", "MixedChunkedScheduler", "SarathiScheduler", "Scheduler", "pack_decode_first"]
