"""Reading what the control plane did and holds: ``governor status`` and ``governor explain``."""

from services.inspection.decisions import find_decision, find_snapshot
from services.inspection.status import ConsumerStatus, EngineStatus, PolicyStatus, StatusReport, collect_status

__all__ = [
    "ConsumerStatus",
    "EngineStatus",
    "PolicyStatus",
    "StatusReport",
    "collect_status",
    "find_decision",
    "find_snapshot",
]
