"""Reading what the control plane did and holds: ``governor status`` and ``governor explain``."""

from services.inspection.decisions import find_decision, find_snapshot
from services.inspection.scaling import PoolStatus, collect_pool_status, pool_statuses
from services.inspection.status import ConsumerStatus, EngineStatus, PolicyStatus, StatusReport, collect_status

__all__ = [
    "ConsumerStatus",
    "EngineStatus",
    "PolicyStatus",
    "PoolStatus",
    "StatusReport",
    "collect_pool_status",
    "collect_status",
    "find_decision",
    "find_snapshot",
    "pool_statuses",
]
