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

Policy configuration records (``PolicyConfigRecord``, appended to the same topic by
``governor run policy --config``/``--shadow`` and ``governor config apply``) are applied in log
order: the live one replaces the params and scopes every following snapshot is decided with, a
named one starts (or stops) a shadow policy (services/policy/shadow.py). The applied records are
committed with the offsets, so a restarted service decides with the configuration it had.

Every poll measures the lag (health: lag with nothing decided is a stall) and checks the partition
against the log its applied offset came from (services/log_reset.py). On a new log (the broker
restarted without storage, the topic was recreated) the partition is read again from its
beginning and the fleet aggregators start empty; the applied configuration, the shadows and every
policy document are kept (docs/operations.md, "Log resets").
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

import structlog
from kafka import TopicPartition
from kafka.consumer.fetcher import ConsumerRecord
from pydantic import Field, TypeAdapter, ValidationError

from schemas.errors import GovernorError, InvalidInputError
from schemas.names import DECISIONS_TOPIC, ESTIMATES_TOPIC
from schemas.records import DecisionRecord, EstimateSnapshot, PolicyConfigRecord
from schemas.signing import PolicyKeyring
from services.headline import parse_document
from services.health import ServiceMetrics
from services.kafka_clients import KafkaLogView, Rebalance, consumer_lag, group_consumer, record_producer
from services.kafka_factory import PLAINTEXT
from services.log_reset import LogReset, LogWatch
from services.policy.config import PolicySet, config_policy_set
from services.policy.decisions import DecisionMaker
from services.policy.pins import PinBoard
from services.policy.registry import PolicyRegistry
from services.policy.shadow import ShadowPolicy
from services.policy.wiring.fleetopt import FLEET_SLOT_S
from services.settings import LOCAL_BROKER_TIMEOUTS, KafkaClientTimeouts, KafkaSecurity
from services.store.protocol import Store

log = structlog.get_logger(__name__)

CONSUMER_NAME = "policy"
LIVE_CONFIG = "live"
CONFIG_STATE_SCOPE = "policy-config"
_LOG_RECORD: TypeAdapter[EstimateSnapshot | PolicyConfigRecord] = TypeAdapter(
    Annotated[EstimateSnapshot | PolicyConfigRecord, Field(discriminator="record_type")]
)


@dataclass(slots=True)
class PolicyCounters:
    """What the policy service has done."""

    snapshots: int = 0
    fleet_snapshots: int = 0
    decisions: int = 0
    refused: int = 0
    invalid: int = 0
    skipped_offsets: int = 0
    configs: int = 0
    configs_invalid: int = 0
    shadow_decisions: int = 0
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
        pins: PinBoard | None = None,
        fleet_slot_s: float = FLEET_SLOT_S,
        kafka_timeouts: KafkaClientTimeouts = LOCAL_BROKER_TIMEOUTS,
        security: KafkaSecurity = PLAINTEXT,
        keyring: PolicyKeyring | None = None,
    ) -> None:
        self._deployment = deployment
        self._store = store
        self._default_registry = registry
        self._fleet_slot_s = fleet_slot_s
        self._decider = DecisionMaker(registry, store, pins=pins, keyring=keyring)
        self._configs: dict[str, PolicyConfigRecord] = {}
        self.shadows: dict[str, ShadowPolicy] = {}
        self._clock = clock
        self._metrics = metrics
        self.counters = PolicyCounters()
        self._applied: dict[str, int] = {}
        self._consumer = group_consumer(
            bootstrap, group_id or f"governor-policy-{deployment}", timeouts=kafka_timeouts, security=security
        )
        self._producer = record_producer(bootstrap, timeouts=kafka_timeouts, security=security)
        self._log_view = KafkaLogView(self._consumer)
        self._log_watch = LogWatch(consumer=CONSUMER_NAME, store=store, metrics=metrics)
        self._consumer.subscribe([ESTIMATES_TOPIC], listener=Rebalance(self.on_assigned))
        self._stopped = False

    def on_assigned(self, partitions: list[TopicPartition]) -> None:
        """Reload the configuration, the shadows and the fleet aggregators; seek past the applied offsets."""
        self._applied = self._store.applied_offsets(CONSUMER_NAME)
        self._decider.configure(PolicySet(registry=self._default_registry))
        self._configs.clear()
        self.shadows.clear()
        stored = self._store.load_states([CONFIG_STATE_SCOPE]).get(CONFIG_STATE_SCOPE)
        for body in json.loads(stored).values() if stored is not None else []:
            self._apply_config(PolicyConfigRecord.model_validate_json(json.dumps(body)))
        shadow_states = self._store.load_states([shadow.state_scope for shadow in self.shadows.values()])
        for shadow in self.shadows.values():
            if shadow.state_scope in shadow_states:
                shadow.load(shadow_states[shadow.state_scope])
        self._decider.aggregators.clear()
        self._decider.load_aggregators(self._store.load_states(self._decider.fleet_scopes()))
        for tp in partitions:
            applied = self._applied.get(f"{tp.topic}:{tp.partition}")
            if applied is not None:
                self._consumer.seek(tp, applied + 1)
        self._log_watch.assigned(self._log_view, [(tp.topic, tp.partition) for tp in partitions])
        log.info(
            "partitions_assigned",
            partitions=sorted(tp.partition for tp in partitions),
            aggregators=sorted(self._decider.aggregators),
            config=self._decider.policy_set.digest,
            shadows=sorted(self.shadows),
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
            records = self._on_current_logs([record for part in batch.values() for record in part])
            if self._metrics is not None:
                self._metrics.lag_measured(consumer_lag(self._consumer), len(self._consumer.assignment()))
                if records:
                    self._metrics.folded()
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
            if offsets and self._store.commit(CONSUMER_NAME, offsets, self._states(), {}):
                self._applied.update(offsets)
            self._consumer.commit()
            if self._metrics is not None:
                self._metrics.lag.set(consumer_lag(self._consumer))
        return self.counters

    def _on_current_logs(self, records: list[ConsumerRecord]) -> list[ConsumerRecord]:
        """Rebuild every partition found on a new log (read again from its beginning); keep the others' records."""
        next_offsets: dict[tuple[str, int], int] = {}
        for tp in self._consumer.assignment():
            applied = self._applied.get(f"{tp.topic}:{tp.partition}")
            if applied is not None:
                next_offsets[(tp.topic, tp.partition)] = applied + 1
        resets = self._log_watch.check(self._log_view, next_offsets)
        for reset in resets:
            self._rebuild(reset)
        rebuilt = {(reset.topic, reset.partition) for reset in resets}
        return [record for record in records if (record.topic, record.partition) not in rebuilt]

    def _rebuild(self, reset: LogReset) -> None:
        """Forget the partition's applied offset and the fleet aggregators; read it from its beginning."""
        self._applied.pop(reset.field, None)
        dropped = self._decider.fleet_scopes()
        self._decider.aggregators.clear()
        self._store.reset_partition(CONSUMER_NAME, reset.field, reset.topic_id, {}, dropped)
        self._consumer.seek_to_beginning(TopicPartition(reset.topic, reset.partition))
        log.warning("partition_rebuilding", topic=reset.topic, partition=reset.partition, aggregators_reset=dropped)

    def _states(self) -> dict[str, str]:
        """What a commit stores with the offsets: aggregators, applied configs, shadows' documents."""
        states = self._decider.aggregator_states()
        states[CONFIG_STATE_SCOPE] = json.dumps(
            {name: json.loads(record.model_dump_json()) for name, record in sorted(self._configs.items())}
        )
        for shadow in self.shadows.values():
            states[shadow.state_scope] = shadow.state()
        return states

    def _apply_config(self, record: PolicyConfigRecord) -> None:
        """Decide with ``record`` from here on: the live configuration, or a shadow's."""
        source = f"config record {record.name!r} ({record.source or 'no file'})"
        try:
            policy_set = config_policy_set(record.config, source=source, fleet_slot_s=self._fleet_slot_s)
        except InvalidInputError as exc:
            self.counters.configs_invalid += 1
            log.warning("config_invalid", name=record.name, reason=str(exc))
            return
        self.counters.configs += 1
        self._configs[record.name] = record
        if record.name == LIVE_CONFIG:
            self._decider.configure(policy_set)
        elif record.config is None:
            self.shadows.pop(record.name, None)
            del self._configs[record.name]
        elif record.name not in self.shadows or self.shadows[record.name].policy_set.digest != policy_set.digest:
            self.shadows[record.name] = ShadowPolicy(record.name, policy_set)
        log.info("config_applied", name=record.name, digest=policy_set.digest, source=record.source)

    def _handle(self, raw: bytes) -> None:
        started = self._clock()
        try:
            parsed = _LOG_RECORD.validate_json(raw)
        except ValidationError as exc:
            self.counters.invalid += 1
            log.warning("snapshot_invalid", reason=exc.errors(include_url=False)[0]["msg"])
            return
        if parsed.deployment != self._deployment:
            return
        if isinstance(parsed, PolicyConfigRecord):
            self._apply_config(parsed)
            return
        snapshot = parsed
        self.counters.snapshots += 1
        if self._metrics is not None:
            self._metrics.snapshot_seen(snapshot.scope, snapshot.ts)
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
        for shadow in self.shadows.values():
            try:
                shadow_records = shadow.on_snapshot(snapshot, handled.fleet_snapshots)
            except GovernorError:
                log.exception(
                    "shadow_decision_failed", shadow=shadow.name, scope=snapshot.scope, trigger=snapshot.trigger
                )
                continue
            for record in shadow_records:
                self.counters.shadow_decisions += 1
                self._send(record)

    def _send(self, record: DecisionRecord) -> None:
        key = f"{record.kind}:{record.scope}".encode()
        self._producer.send(DECISIONS_TOPIC, key=key, value=record.model_dump_json().encode())

    def _record(self, record: DecisionRecord, started: float) -> None:
        self._send(record)
        if record.held_by_pin:
            self.counters.decisions += 1
            log.info("policy_held_by_pin", kind=record.kind, scope=record.scope, version=record.version)
        elif record.accepted:
            self.counters.decisions += 1
            log.info("policy_decided", kind=record.kind, scope=record.scope, version=record.version)
            if self._metrics is not None:
                self._metrics.decided(parse_document(record.kind, record.document))
                self._metrics.loop_latency.observe(self._clock() - started)
        else:
            self.counters.refused += 1
            if self._metrics is not None:
                self._metrics.refused(record.kind)
            log.warning("policy_refused", kind=record.kind, scope=record.scope, version=record.version)
        self.counters.last_decision_latency_s = self._clock() - started
