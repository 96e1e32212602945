"""The pure decide side: which policies run, their wiring from an estimate snapshot to inputs, and the document.

``PolicyRegistry`` and ``PolicySpec`` (``registry.py``) say which policies a deployment runs and when
each is triggered; ``wiring/`` binds each paper's ``decide`` (policies/) to the estimate summaries the
fold (fold/) produces; ``decide_from_snapshot`` (``from_snapshot.py``) turns one snapshot into a
document. No I/O, no clock, no logging (tests/test_layering.py checks it): the live policy service and
the offline replay decide the same snapshots alike.
"""

from decide.from_snapshot import decide_from_snapshot
from decide.registry import PolicyRegistry, PolicySpec
from decide.specs import default_registry

__all__ = ["PolicyRegistry", "PolicySpec", "decide_from_snapshot", "default_registry"]
