"""The live policy service: ``gov.estimates`` snapshots -> decisions in Redis and on ``gov.policy.decisions``.

It reads the single-partition snapshot topic in order, so every policy sees its snapshots in the
order the processors took them. Each snapshot goes through ``DecisionMaker`` (compare-and-set into
Redis, pub/sub announcement); decision records go to ``gov.policy.decisions`` and the fleet
snapshots that fleet aggregators build go to ``gov.estimates`` (for the record: the service skips
fleet-scope snapshots it reads back). After each batch the fleet aggregators' states and the
batch's offsets are committed to Redis in one atomic, offset-fenced write, exactly as the stream
processor does; on assignment each partition is sought past its applied offset, so a restarted
service neither loses nor repeats an aggregation, and engine-scope duplicates are skipped by
snapshot version.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog
from kafka import TopicPartition
from pydantic import ValidationError

from schemas.errors import GovernorError
from schemas.names import DECISIONS_TOPIC, ESTIMATES_TOPIC
from schemas.records import DecisionRecord, EstimateSnapshot
from services.health import ServiceMetrics
from services.kafka_clients import Rebalance, group_consumer, record_producer
from services.policy.decisions import DecisionMaker
from services.policy.registry import PolicyRegistry
from services.settings import LOCAL_BROKER_TIMEOUTS, KafkaClientTimeouts
from services.store.protocol import Store

log = structlog.get_logger(__name__)

CONSUMER_NAME = "policy"


@dataclass(slots=True)
class PolicyCounters:
    """What the policy service has done."""

    snapshots: int = 0
    fleet_snapshots: int = 0
    decisions: int = 0
    refused: int = 0
    invalid: int = 0
    skipped_offsets: int = 0
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
        kafka_timeouts: KafkaClientTimeouts = LOCAL_BROKER_TIMEOUTS,
    ) -> None:
        self._deployment = deployment
        self._store = store
        self._decider = DecisionMaker(registry, store)
        self._clock = clock
        self._metrics = metrics
        self.counters = PolicyCounters()
        self._applied: dict[str, int] = {}
        self._consumer = group_consumer(bootstrap, group_id or f"governor-policy-{deployment}", timeouts=kafka_timeouts)
        self._producer = record_producer(bootstrap, timeouts=kafka_timeouts)
        self._consumer.subscribe([ESTIMATES_TOPIC], listener=Rebalance(self.on_assigned))
        self._stopped = False

    def on_assigned(self, partitions: list[TopicPartition]) -> None:
        """Reload the fleet aggregators and seek each partition past its applied offset."""
        self._applied = self._store.applied_offsets(CONSUMER_NAME)
        self._decider.aggregators.clear()
        self._decider.load_aggregators(self._store.load_states(self._decider.fleet_scopes()))
        for tp in partitions:
            applied = self._applied.get(f"{tp.topic}:{tp.partition}")
            if applied is not None:
                self._consumer.seek(tp, applied + 1)
        log.info(
            "partitions_assigned",
            partitions=sorted(tp.partition for tp in partitions),
            aggregators=sorted(self._decider.aggregators),
        )

    def stop(self) -> None:
        """Ask ``run`` to return after the current batch."""
        self._stopped = True

    def close(self) -> None:
        """Leave the group and close the clients."""
        self._consumer.close()
        self._producer.close(timeout=5)

    def run(self, *, idle_exit_s: float | None = None) -> PolicyCounters:
        """Decide from snapshots until ``stop`` (or ``idle_exit_s`` without records while assigned)."""
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
            offsets: dict[str, int] = {}
            for record in records:
                field = f"{record.topic}:{record.partition}"
                if record.offset <= self._applied.get(field, -1):
                    self.counters.skipped_offsets += 1
                    continue
                offsets[field] = max(offsets.get(field, -1), record.offset)
                self._handle(record.value)
            self._producer.flush(timeout=10)
            if offsets and self._store.commit(CONSUMER_NAME, offsets, self._decider.aggregator_states(), {}):
                self._applied.update(offsets)
            self._consumer.commit()
        return self.counters

    def _handle(self, raw: bytes) -> None:
        started = self._clock()
        try:
            snapshot = EstimateSnapshot.model_validate_json(raw)
        except ValidationError as exc:
            self.counters.invalid += 1
            log.warning("snapshot_invalid", reason=exc.errors(include_url=False)[0]["msg"])
            return
        if snapshot.deployment != self._deployment:
            return
        self.counters.snapshots += 1
        try:
            handled = self._decider.on_snapshot(snapshot)
        except GovernorError:
            log.exception("decision_failed", scope=snapshot.scope, trigger=snapshot.trigger)
            return
        for fleet_snapshot in handled.fleet_snapshots:
            self.counters.fleet_snapshots += 1
            self._producer.send(ESTIMATES_TOPIC, key=b"fleet", value=fleet_snapshot.model_dump_json().encode())
        for record in handled.records:
            self._record(record, started)

    def _record(self, record: DecisionRecord, started: float) -> None:
        key = f"{record.kind}:{record.scope}".encode()
        self._producer.send(DECISIONS_TOPIC, key=key, value=record.model_dump_json().encode())
        if record.accepted:
            self.counters.decisions += 1
            log.info("policy_decided", kind=record.kind, scope=record.scope, version=record.version)
            if self._metrics is not None:
                self._metrics.decisions.labels(kind=record.kind).inc()
                self._metrics.loop_latency.observe(self._clock() - started)
        else:
            self.counters.refused += 1
            log.warning("policy_refused", kind=record.kind, scope=record.scope, version=record.version)
        self.counters.last_decision_latency_s = self._clock() - started
