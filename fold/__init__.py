"""The pure fold: telemetry events into per-engine estimates, fleet contributions and snapshot triggers.

No I/O, no clock, no logging (tests/test_layering.py checks it): the stream processor (services/stream/)
and the offline replay drive the same ``Folder`` over the same events, so they take the same snapshots
(DESIGN principle 2).
"""

from fold.engine_estimates import EngineEstimates
from fold.folder import REGISTRATION_GRACE_S, Folder

__all__ = ["REGISTRATION_GRACE_S", "EngineEstimates", "Folder"]
