"""Engine adapters: what runs inside a real serving engine to feed Governor and obey it."""

from services.engines.stream import EngineStream, RequestTrack
from services.sdk.step_counts import StepCounts

__all__ = ["EngineStream", "RequestTrack", "StepCounts"]
