"""``governor scale``: FleetOpt's pool sizes carried to real capacity through one connector per pool."""

from services.scaler.actions import ActionSink, KafkaActionSink, ListActionSink
from services.scaler.connector import MemoryConnector, ScaleConnector
from services.scaler.external_scaler import DesiredReplicas, ExternalScalerServer, KedaConnector
from services.scaler.service import ScalerCounters, ScalerMetrics, ScalerService, pool_limits

__all__ = [
    "ActionSink",
    "DesiredReplicas",
    "ExternalScalerServer",
    "KafkaActionSink",
    "KedaConnector",
    "ListActionSink",
    "MemoryConnector",
    "ScaleConnector",
    "ScalerCounters",
    "ScalerMetrics",
    "ScalerService",
    "pool_limits",
]
