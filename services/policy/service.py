"""The live policy service: ``gov.estimates`` snapshots -> decisions in Redis and on ``gov.policy.decisions``.

It reads the single-partition snapshot topic in order, so every policy sees its snapshots in the
order the processors took them; each snapshot goes through ``DecisionMaker`` (compare-and-set into
Redis, pub/sub announcement) and the decision record is appended to ``gov.policy.decisions``.
The service keeps no state of its own: a restarted service re-reads the topic from its committed
offset and recognises the snapshots it already decided from.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog
from kafka import KafkaConsumer, KafkaProducer
from pydantic import ValidationError

from schemas.errors import GovernorError
from schemas.names import DECISIONS_TOPIC, ESTIMATES_TOPIC
from schemas.records import EstimateSnapshot
from services.health import ServiceMetrics
from services.policy.decisions import DecisionMaker
from services.policy.registry import PolicyRegistry
from services.store.protocol import Store

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class PolicyCounters:
    """What the policy service has done."""

    snapshots: int = 0
    decisions: int = 0
    refused: int = 0
    invalid: int = 0
    last_decision_latency_s: float = 0.0


class PolicyService:
    """One policy-service process of a deployment."""

    def __init__(
        self,
        *,
        deployment: str,
        bootstrap: str,
        store: Store,
        registry: PolicyRegistry,
        group_id: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        metrics: ServiceMetrics | None = None,
    ) -> None:
        self._deployment = deployment
        self._metrics = metrics
        self._decider = DecisionMaker(registry, store)
        self._clock = clock
        self.counters = PolicyCounters()
        self._consumer = KafkaConsumer(
            ESTIMATES_TOPIC,
            bootstrap_servers=bootstrap,
            group_id=group_id or f"governor-policy-{deployment}",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_poll_interval_ms=5000,
            session_timeout_ms=6000,
            heartbeat_interval_ms=1000,
        )
        self._producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=2, acks=1, enable_idempotence=False)
        self._stopped = False

    def stop(self) -> None:
        """Ask ``run`` to return after the current batch."""
        self._stopped = True

    def close(self) -> None:
        """Leave the group and close the clients."""
        self._consumer.close()
        self._producer.close(timeout=5)

    def run(self, *, idle_exit_s: float | None = None) -> PolicyCounters:
        """Decide from snapshots until ``stop`` (or ``idle_exit_s`` without records)."""
        idle_since = self._clock()
        while not self._stopped:
            batch = self._consumer.poll(timeout_ms=100)
            records = [record for part in batch.values() for record in part]
            if self._metrics is not None:
                self._metrics.progressed()
            if not records:
                if not self._consumer.assignment():
                    idle_since = self._clock()
                elif idle_exit_s is not None and self._clock() - idle_since > idle_exit_s:
                    break
                continue
            idle_since = self._clock()
            for record in records:
                self._handle(record.value)
            self._producer.flush(timeout=10)
            self._consumer.commit()
        return self.counters

    def _handle(self, raw: bytes) -> None:
        started = self._clock()
        try:
            snapshot = EstimateSnapshot.model_validate_json(raw)
        except ValidationError as exc:
            self.counters.invalid += 1
            log.warning("snapshot_invalid", reason=str(exc).splitlines()[0])
            return
        if snapshot.deployment != self._deployment:
            return
        self.counters.snapshots += 1
        try:
            record = self._decider.on_snapshot(snapshot)
        except GovernorError:
            log.exception("decision_failed", scope=snapshot.scope, trigger=snapshot.trigger)
            return
        if record is None:
            return
        key = f"{record.kind}:{record.scope}".encode()
        self._producer.send(DECISIONS_TOPIC, key=key, value=record.model_dump_json().encode())
        if record.accepted:
            self.counters.decisions += 1
            if self._metrics is not None:
                self._metrics.decisions.labels(kind=record.kind).inc()
                self._metrics.loop_latency.observe(self._clock() - started)
            log.info("policy_decided", kind=record.kind, scope=record.scope, version=record.version)
        else:
            self.counters.refused += 1
            log.warning("policy_refused", kind=record.kind, scope=record.scope, version=record.version)
        self.counters.last_decision_latency_s = self._clock() - started
