"""Engine schedulers of the simulator: the Scheduler protocol, the baselines and the papers' engine sides."""

from services.sim.schedulers.base import BatchPlan, EngineView, Scheduler
from services.sim.schedulers.baselines import MixedChunkedScheduler, SarathiServeScheduler, VllmPrefillFirstScheduler
from services.sim.schedulers.ebplus import EbplusScheduler, FixedEbScheduler
from services.sim.schedulers.packing import pack_decode_first
from services.sim.schedulers.slai import SlaiScheduler, safe_default_payload

__all__ = [
    "BatchPlan",
    "EbplusScheduler",
    "EngineView",
    "FixedEbScheduler",
    "MixedChunkedScheduler",
    "SarathiServeScheduler",
    "Scheduler",
    "SlaiScheduler",
    "VllmPrefillFirstScheduler",
    "pack_decode_first",
    "safe_default_payload",
]
