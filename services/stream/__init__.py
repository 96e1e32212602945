"""Stream processing: the pure fold of telemetry into estimates, and the live processor around it."""

from services.stream.estimates import EngineEstimates
from services.stream.fold import Folder
from services.stream.processor import StreamProcessor

__all__ = ["EngineEstimates", "Folder", "StreamProcessor"]
