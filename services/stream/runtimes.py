"""Pick the stream processor's runtime by name (``GOVERNOR_STREAM_RUNTIME`` / ``--runtime``).

Both runtimes fold through the same batch handling (services/stream/batches.py); they differ in
their consumer loop only. docs/contracts.md ("Runtimes") gives the measured trade-off.
"""

from __future__ import annotations

from typing import Literal

from services.health import ServiceMetrics
from services.policy.registry import PolicyRegistry
from services.store.protocol import Store
from services.stream.faust_runtime import FaustStreamProcessor
from services.stream.processor import StreamProcessor

Runtime = Literal["kafka", "faust"]
RUNTIMES: tuple[Runtime, ...] = ("kafka", "faust")


def stream_processor(
    runtime: Runtime,
    *,
    deployment: str,
    bootstrap: str,
    store: Store,
    registry: PolicyRegistry,
    metrics: ServiceMetrics | None = None,
) -> StreamProcessor | FaustStreamProcessor:
    """A stream processor of ``deployment`` on ``runtime`` (kafka: kafka-python; faust: faust-streaming)."""
    if runtime == "faust":
        return FaustStreamProcessor(
            deployment=deployment, bootstrap=bootstrap, store=store, registry=registry, metrics=metrics
        )
    return StreamProcessor(deployment=deployment, bootstrap=bootstrap, store=store, registry=registry, metrics=metrics)
