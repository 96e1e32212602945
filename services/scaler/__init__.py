"""``governor scale``: FleetOpt's pool sizes carried to real capacity through one connector per pool."""

from services.scaler.actions import ActionSink, KafkaActionSink, ListActionSink
from services.scaler.connector import MemoryConnector, ScaleConnector
from services.scaler.explanation import explain_action
from services.scaler.external_scaler import DesiredReplicas, ExternalScalerServer, KedaConnector
from services.scaler.gateway_admin import AdminUpstream, GatewayAdmin
from services.scaler.local_engines import LocalEngineConnector
from services.scaler.service import ScalerCounters, ScalerMetrics, ScalerService, pool_limits

__all__ = [
    "ActionSink",
    "AdminUpstream",
    "DesiredReplicas",
    "ExternalScalerServer",
    "GatewayAdmin",
    "KafkaActionSink",
    "KedaConnector",
    "ListActionSink",
    "LocalEngineConnector",
    "MemoryConnector",
    "ScaleConnector",
    "ScalerCounters",
    "ScalerMetrics",
    "ScalerService",
    "explain_action",
    "pool_limits",
]
