"""Pick the stream processor's runtime by name (``GOVERNOR_STREAM_RUNTIME`` / ``--runtime``).

Both runtimes fold through the same batch handling (services/stream/batches.py); they differ in
their consumer loop only. docs/contracts.md ("Runtimes") gives the measured trade-off.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal

from fold.event_guard import DEFAULT_LIMITS, GuardLimits
from fold.triggers import TriggerSpec
from schemas.errors import ConfigError
from schemas.signing import PolicyKeyring
from services.checkpoints import CheckpointSource
from services.health import ServiceMetrics
from services.kafka_security import PLAINTEXT
from services.settings import (
    DEFAULT_LIFECYCLE,
    LOCAL_BROKER_TIMEOUTS,
    STREAM_COMMIT_INTERVAL_S,
    EngineLifecycle,
    KafkaClientTimeouts,
    KafkaSecurity,
)
from services.store.protocol import Store
from services.stream.processor import StreamProcessor

if TYPE_CHECKING:
    from services.stream.faust_runtime import FaustStreamProcessor

Runtime = Literal["kafka", "faust"]
RUNTIMES: tuple[Runtime, ...] = ("kafka", "faust")


def stream_processor(
    runtime: Runtime,
    *,
    deployment: str,
    bootstrap: str,
    store: Store,
    registry: Iterable[TriggerSpec],
    metrics: ServiceMetrics | None = None,
    lifecycle: EngineLifecycle = DEFAULT_LIFECYCLE,
    kafka_timeouts: KafkaClientTimeouts = LOCAL_BROKER_TIMEOUTS,
    security: KafkaSecurity = PLAINTEXT,
    limits: GuardLimits = DEFAULT_LIMITS,
    commit_interval_s: float = STREAM_COMMIT_INTERVAL_S,
    keyring: PolicyKeyring | None = None,
    checkpoint_interval_s: float = 0.0,
    checkpoint_source: CheckpointSource | None = None,
) -> StreamProcessor | FaustStreamProcessor:
    """A stream processor of ``deployment`` on ``runtime`` (kafka: kafka-python; faust: faust-streaming).

    Raises:
        ConfigError: the faust runtime without faust-streaming installed (the ``faust`` extra), or with
            Kafka SASL or TLS settings, which it does not take yet (faust's aiokafka clients name them
            differently; docs/security.md).
    """
    if runtime == "faust":
        if not _faust_installed():
            msg = "the faust runtime needs faust-streaming: pip install 'llm-governor[faust]' (or use --runtime kafka)"
            raise ConfigError(msg)
        if security != PLAINTEXT:
            msg = (
                f"the faust runtime does not take Kafka security settings yet (protocol {security.protocol}); "
                "run the stream processor with --runtime kafka"
            )
            raise ConfigError(msg)
        from services.stream.faust_runtime import FaustStreamProcessor  # imports faust: only where it runs

        return FaustStreamProcessor(
            deployment=deployment,
            bootstrap=bootstrap,
            store=store,
            registry=registry,
            metrics=metrics,
            lifecycle=lifecycle,
            kafka_timeouts=kafka_timeouts,
            limits=limits,
            commit_interval_s=commit_interval_s,
            keyring=keyring,
            checkpoint_interval_s=checkpoint_interval_s,
            checkpoint_source=checkpoint_source,
        )
    return StreamProcessor(
        deployment=deployment,
        bootstrap=bootstrap,
        store=store,
        registry=registry,
        metrics=metrics,
        lifecycle=lifecycle,
        kafka_timeouts=kafka_timeouts,
        security=security,
        limits=limits,
        commit_interval_s=commit_interval_s,
        keyring=keyring,
        checkpoint_interval_s=checkpoint_interval_s,
        checkpoint_source=checkpoint_source,
    )


def _faust_installed() -> bool:
    """True when faust-streaming can be imported.

    Once imported, faust replaces its module with a lazy one whose ``__spec__`` is None, on which
    ``find_spec`` raises ValueError; so an imported faust is taken as installed.
    """
    return "faust" in sys.modules or importlib.util.find_spec("faust") is not None
