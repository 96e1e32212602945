"""``PolicyHandler``: what the policy service does with each record of ``gov.estimates``, without the Kafka loop.

The live service (services/policy/service.py) owns the consumer, the outages and the commits; this
class owns everything a record changes, so it can be driven and tested without a broker:

- each record is read (services/policy/intake.py); a record it cannot read, or a snapshot the
  snapshot ledger finds inconsistent, goes to ``gov.deadletter`` with its reason and source offset,
  and a snapshot whose decision raises is dead-lettered the same way: no record stops a scope or
  the service (issue 15 item 1, issue 19 item 6). Records of another deployment are counted and
  reported once per deployment (on a shared topic, dead-lettering them would copy every other
  deployment's snapshots);
- configuration records are applied in log order (the live one, or a shadow's);
- each snapshot is staged by the ``DecisionMaker``; its records (decisions, fleet snapshots, shadow
  decisions, dead letters) go to the ``RecordSink`` and its writes into the batch, for the service
  to apply once the sink has confirmed delivery;
- ``states`` is what a commit stores beside the offsets, and ``restore`` puts it back.

Only ``BackendUnavailableError`` leaves ``handle``: an outage, for which the service retries the batch.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import structlog

from schemas.errors import BackendUnavailableError, ConfigError, InvalidInputError
from schemas.estimates import FleetContribution
from schemas.names import DEADLETTER_TOPIC, DECISIONS_TOPIC, ESTIMATES_TOPIC
from schemas.policy_docs.base import SourceOffset
from schemas.records import DeadLetter, DecisionRecord, EstimateSnapshot, PolicyConfigRecord
from schemas.signing import PolicyKeyring
from services.headline import parse_document
from services.health import ServiceMetrics
from services.policy.config import PolicySet, config_policy_set
from services.policy.decisions import DecisionMaker, PolicyWrite
from services.policy.intake import Refusal, SnapshotLedger, read_record
from services.policy.pins import PinBoard
from services.policy.registry import PolicyRegistry
from services.policy.shadow import ShadowPolicy
from services.policy.wiring.fleetopt import FLEET_SLOT_S
from services.store.protocol import Store

log = structlog.get_logger(__name__)

LIVE_CONFIG = "live"
CONFIG_STATE_SCOPE = "policy-config"
LEDGER_STATE_SCOPE = "policy-ledger"
FLEET_SCOPE = "fleet"
FOREIGN_DEPLOYMENTS_LOGGED = 100
DEAD_LETTER_RAW_CHARS = 70_000


class PolicyRecord(Protocol):
    """What the service reads of a consumed record (kafka-python's records have it)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...


class RecordSink(Protocol):
    """Where the handler's records go: ``Delivery`` on a Kafka producer, or a list in tests."""

    def send(self, topic: str, key: bytes | None, value: bytes) -> None:
        """Send one record (``confirm`` proves delivery)."""
        ...


@dataclass(slots=True)
class PolicyCounters:
    """What the policy service has done."""

    snapshots: int = 0
    fleet_snapshots: int = 0
    decisions: int = 0
    refused: int = 0
    invalid: int = 0
    inconsistent: int = 0
    foreign: int = 0
    skipped_offsets: int = 0
    configs: int = 0
    configs_invalid: int = 0
    shadow_decisions: int = 0
    dead_lettered: int = 0
    batches_retried: int = 0
    last_decision_latency_s: float = 0.0


@dataclass(slots=True)
class PendingBatch:
    """One batch: the offsets it covers and the writes its records imply (done after the records are delivered)."""

    writes: list[PolicyWrite] = field(default_factory=list)
    offsets: dict[str, int] = field(default_factory=dict)
    started_s: float = 0.0


class PolicyHandler:
    """Reads, checks, decides and records every record of ``gov.estimates`` for one deployment."""

    def __init__(
        self,
        *,
        deployment: str,
        store: Store,
        registry: PolicyRegistry,
        sink: RecordSink,
        clock: Callable[[], float] = time.monotonic,
        metrics: ServiceMetrics | None = None,
        pins: PinBoard | None = None,
        fleet_slot_s: float = FLEET_SLOT_S,
        keyring: PolicyKeyring | None = None,
    ) -> None:
        self._deployment = deployment
        self._default_registry = registry
        self._fleet_slot_s = fleet_slot_s
        self.decider = DecisionMaker(registry, store, pins=pins, keyring=keyring)
        self._sink = sink
        self._configs: dict[str, PolicyConfigRecord] = {}
        self.shadows: dict[str, ShadowPolicy] = {}
        self.ledger = SnapshotLedger()
        self._clock = clock
        self._metrics = metrics
        self.counters = PolicyCounters()
        self._foreign_logged: set[str] = set()

    def state_scopes(self, configs_state: str | None) -> list[str]:
        """The store scopes ``restore`` needs besides the configs: the shadows' and the fleet aggregators'."""
        self._restore_configs(configs_state)
        return [shadow.state_scope for shadow in self.shadows.values()] + self.decider.fleet_scopes()

    def restore(self, states: dict[str, str]) -> None:
        """Return to ``states`` (as ``states()`` made them): configs, shadows, aggregators, ledger; nothing staged."""
        self.decider.discard_staged()
        self._restore_configs(states.get(CONFIG_STATE_SCOPE))
        for shadow in self.shadows.values():
            if shadow.state_scope in states:
                shadow.load(states[shadow.state_scope])
        self.decider.aggregators.clear()
        self.decider.load_aggregators({s: states[s] for s in self.decider.fleet_scopes() if s in states})
        ledger = states.get(LEDGER_STATE_SCOPE)
        self.ledger = SnapshotLedger() if ledger is None else SnapshotLedger.from_json(ledger)

    def reset_fleet_and_ledger(self) -> None:
        """Start the fleet aggregators and the snapshot ledger empty (a log reset; the configs and shadows stay)."""
        self.decider.aggregators.clear()
        self.ledger = SnapshotLedger()

    def _restore_configs(self, configs_state: str | None) -> None:
        self.decider.configure(PolicySet(registry=self._default_registry))
        self._configs.clear()
        self.shadows.clear()
        for body in json.loads(configs_state).values() if configs_state is not None else []:
            self._apply_config(PolicyConfigRecord.model_validate_json(json.dumps(body)), announce=False)

    def apply(self, batch: PendingBatch) -> bool:
        """Write the batch's documents (their records are delivered); send a correction for each one refused.

        Returns:
            True when corrections were sent (the caller confirms their delivery).

        Raises:
            BackendUnavailableError: the store failed; calling again with the same batch resumes.
        """
        refused = self.decider.apply(batch.writes)
        for record in refused.values():
            self._send(record)
            self._refused(record)
        return bool(refused)

    def states(self) -> dict[str, str]:
        """What a commit stores with the offsets: aggregators, applied configs, shadows' documents, the ledger."""
        states = self.decider.aggregator_states()
        states[CONFIG_STATE_SCOPE] = json.dumps(
            {name: json.loads(record.model_dump_json()) for name, record in sorted(self._configs.items())}
        )
        for shadow in self.shadows.values():
            states[shadow.state_scope] = shadow.state()
        states[LEDGER_STATE_SCOPE] = self.ledger.to_json()
        return states

    def _apply_config(self, record: PolicyConfigRecord, *, announce: bool = True) -> None:
        """Decide with ``record`` from here on: the live configuration, or a shadow's (logged when ``announce``)."""
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
            self.decider.configure(policy_set)
        elif record.config is None:
            self.shadows.pop(record.name, None)
            del self._configs[record.name]
        elif record.name not in self.shadows or self.shadows[record.name].policy_set.digest != policy_set.digest:
            self.shadows[record.name] = ShadowPolicy(record.name, policy_set)
        if announce:
            log.info("config_applied", name=record.name, digest=policy_set.digest, source=record.source)

    def handle(self, record: PolicyRecord, batch: PendingBatch) -> None:
        """Read one record and act on it; dead-letter what cannot be taken. Raises only for outages.

        Raises:
            BackendUnavailableError: Redis or the broker failed; the caller forgets the batch and retries it.
        """
        parsed = read_record(record.value)
        if isinstance(parsed, Refusal):
            self.counters.invalid += 1
            self._dead_letter(record, parsed.reason, parsed.field)
            return
        if parsed.deployment != self._deployment:
            self._foreign(parsed.deployment)
            return
        if isinstance(parsed, PolicyConfigRecord):
            self._apply_config(parsed)
            return
        if parsed.scope != FLEET_SCOPE and not isinstance(parsed.estimates, FleetContribution):
            verdict = self.ledger.check(parsed)
            if verdict.refused is not None:
                self.counters.inconsistent += 1
                self._dead_letter(record, verdict.refused, "version")
                return
            if verdict.resynced:
                log.warning("snapshot_ledger_resynced", scope=parsed.scope, version=parsed.version)
        self._snapshot(parsed, record, batch)

    def _snapshot(self, snapshot: EstimateSnapshot, record: PolicyRecord, batch: PendingBatch) -> None:
        self.counters.snapshots += 1
        if self._metrics is not None:
            self._metrics.snapshot_seen(snapshot.scope, snapshot.ts)
        try:
            handled = self.decider.stage(snapshot)
        except BackendUnavailableError:
            raise
        except ConfigError as exc:
            self._dead_letter(record, f"no policy for this snapshot: {exc}", "trigger")
            return
        except Exception as exc:  # one snapshot's failure must not stop its scope or the service
            log.warning("decision_failed", scope=snapshot.scope, trigger=snapshot.trigger, error=repr(exc)[:300])
            self._dead_letter(record, f"decision failed: {type(exc).__name__}: {exc}", None)
            return
        for fleet_snapshot in handled.fleet_snapshots:
            self.counters.fleet_snapshots += 1
            self._sink.send(ESTIMATES_TOPIC, b"fleet", fleet_snapshot.model_dump_json().encode())
        for decision in handled.records:
            self._record(decision, batch.started_s)
        batch.writes.extend(handled.writes)
        for shadow in self.shadows.values():
            try:
                shadow_records = shadow.on_snapshot(snapshot, handled.fleet_snapshots)
            except Exception as exc:  # a shadow's failure never touches the live policy
                log.warning(
                    "shadow_decision_failed",
                    shadow=shadow.name,
                    scope=snapshot.scope,
                    trigger=snapshot.trigger,
                    error=repr(exc)[:300],
                )
                continue
            for shadow_record in shadow_records:
                self.counters.shadow_decisions += 1
                self._send(shadow_record)

    def _foreign(self, deployment: str) -> None:
        """Count a record of another deployment (the topic may be shared); say so once per deployment.

        Not dead-lettered: on a shared topic that would copy every other deployment's snapshots.
        """
        self.counters.foreign += 1
        if deployment not in self._foreign_logged and len(self._foreign_logged) < FOREIGN_DEPLOYMENTS_LOGGED:
            self._foreign_logged.add(deployment)
            log.info("foreign_deployment_records", deployment=deployment, ours=self._deployment)

    def _dead_letter(self, record: PolicyRecord, reason: str, field_name: str | None) -> None:
        raw = record.value.decode("utf-8", errors="replace")[:DEAD_LETTER_RAW_CHARS] if record.value else ""
        letter = DeadLetter(
            reason=reason[:2048],
            field=None if field_name is None else field_name[:512],
            source=SourceOffset(topic=record.topic, partition=record.partition, offset=record.offset),
            raw=raw,
        )
        self._sink.send(DEADLETTER_TOPIC, record.key, letter.model_dump_json().encode())
        self.counters.dead_lettered += 1
        log.warning("record_dead_lettered", reason=reason[:200], partition=record.partition, offset=record.offset)

    def _send(self, record: DecisionRecord) -> None:
        key = f"{record.kind}:{record.scope}".encode()
        self._sink.send(DECISIONS_TOPIC, key, record.model_dump_json().encode())

    def _refused(self, record: DecisionRecord) -> None:
        self.counters.decisions -= 1
        self.counters.refused += 1
        if self._metrics is not None:
            self._metrics.refused(record.kind)
        log.warning("policy_refused", kind=record.kind, scope=record.scope, version=record.version)

    def _record(self, record: DecisionRecord, started: float) -> None:
        self._send(record)
        self.counters.decisions += 1
        if record.held_by_pin:
            log.info("policy_held_by_pin", kind=record.kind, scope=record.scope, version=record.version)
        else:
            log.info("policy_decided", kind=record.kind, scope=record.scope, version=record.version)
            if self._metrics is not None:
                self._metrics.decided(parse_document(record.kind, record.document))
                self._metrics.loop_latency.observe(self._clock() - started)
        self.counters.last_decision_latency_s = self._clock() - started
