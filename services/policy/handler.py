"""``PolicyHandler``: what the policy service does with each record of ``gov.estimates``, without the Kafka loop.

The live service (services/policy/service.py) owns the consumer, the outages and the commits; this
class owns everything a record changes, so it can be driven and tested without a broker:

- each record is read (services/policy/intake.py); a record it cannot read, or a snapshot the
  snapshot ledger finds inconsistent, goes to ``gov.deadletter`` with its reason and source offset,
  and a snapshot whose decision raises is dead-lettered the same way: no record stops a scope or
  the service. Records of another deployment are counted and
  reported once per deployment (on a shared topic, dead-lettering them would copy every other
  deployment's snapshots);
- configuration records are applied in log order (the live one, or a shadow's);
- each snapshot is staged by the ``DecisionMaker``; its records (decisions, fleet snapshots, shadow
  decisions, dead letters) go to the ``RecordSink`` and its writes into the batch, for the service
  to apply once the sink has confirmed delivery;
- ``states`` is what a commit stores beside the offsets, and ``restore`` puts it back.

Several members of one group share ``gov.estimates`` by partition (docs/operations.md, "Scaling by
partitions"), and each partition is a log of its own: an engine's snapshots all travel on its
scope's partition, the fleet's on the ``fleet`` partition, and every configuration record is copied
to every partition. So the handler keeps, per partition, what that partition's log has set: the
applied configurations (the live one decides that partition's snapshots), the shadows and the
snapshot ledger, each committed under its own store scope (``partition_scope``; partition 0 keeps
the names of the single-partition topic). The fleet aggregators live only in the member that owns
the ``fleet`` partition (the service restores them nowhere else). A member never writes a scope
another member's partition decides, and a stale member's commit is refused by the offset fence of
the partition it lost.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol, TypeVar

import structlog

from decide.registry import PolicyRegistry
from decide.wiring.fleetopt import FLEET_SLOT_S
from fold.fleet import SilenceRule
from fold.snapshot_id import snapshot_id
from schemas.errors import BackendUnavailableError, ConfigError, InvalidInputError
from schemas.estimates import FleetContribution, FleetJoin, FleetSilence
from schemas.names import DEADLETTER_TOPIC, DECISIONS_TOPIC, ESTIMATES_TOPIC
from schemas.policy_docs.base import SourceOffset
from schemas.records import DeadLetter, DecisionRecord, EstimateSnapshot, PolicyConfigRecord, SnapshotProducer
from schemas.signing import PolicyKeyring, sign_snapshot, snapshot_signature_problem
from schemas.snapshot_trigger import SnapshotTrigger
from services.health import ServiceMetrics
from services.kafka_clients import ConsumedRecord
from services.policy.config import PolicySet, config_policy_set
from services.policy.decisions import FLEET_STATE_PREFIX, DecisionMaker, PolicyWrite
from services.policy.intake import Refusal, SnapshotLedger, read_record
from services.policy.pins import PinBoard
from services.policy.shadow import ShadowPolicy
from services.store.protocol import Store
from services.watched_values import parse_document

log = structlog.get_logger(__name__)

LIVE_CONFIG = "live"
CONFIG_STATE_SCOPE = "policy-config"
LEDGER_STATE_SCOPE = "policy-ledger"
FLEET_SCOPE = "fleet"
FOREIGN_DEPLOYMENTS_LOGGED = 100
StateT = TypeVar("StateT")
DEAD_LETTER_RAW_CHARS = 70_000


def partition_scope(name: str, partition: int) -> str:
    """Store scope of the state ``name`` of one ``gov.estimates`` partition.

    Partition 0 keeps the plain name the single-partition topic always used, so its stored state stays valid.
    """
    return name if partition == 0 else f"{name}:{partition}"


def ledger_scope(partition: int) -> str:
    """Store scope of the snapshot ledger of one ``gov.estimates`` partition."""
    return partition_scope(LEDGER_STATE_SCOPE, partition)


def config_scope(partition: int) -> str:
    """Store scope of the configurations applied from one ``gov.estimates`` partition."""
    return partition_scope(CONFIG_STATE_SCOPE, partition)


def scope_parts(scope: str) -> tuple[str, int]:
    """The (state name, partition) of a store scope as ``partition_scope`` builds it: its one inverse.

    A scope with no ``:N`` suffix (or ``:0``, which ``partition_scope`` never writes) is the whole
    name on partition 0.
    """
    name, colon, partition = scope.rpartition(":")
    if colon and partition.isdigit() and partition != "0":
        return name, int(partition)
    return scope, 0


def _scope_partition(name: str, scope: str) -> int | None:
    """The partition whose state ``name`` the store scope ``scope`` is, or None when it is not one."""
    state, partition = scope_parts(scope)
    return partition if state == name else None


def _config_records(configs_state: str) -> list[PolicyConfigRecord]:
    """The configuration records of a stored configs state, in their stored order."""
    return [PolicyConfigRecord.model_validate_json(json.dumps(body)) for body in json.loads(configs_state).values()]


@dataclass(slots=True)
class _Partition:
    """What one partition's log has set: its applied configurations, live policy set, shadows and ledger."""

    policy_set: PolicySet
    configs: dict[str, PolicyConfigRecord] = field(default_factory=dict)
    shadows: dict[str, ShadowPolicy] = field(default_factory=dict)
    ledger: SnapshotLedger = field(default_factory=SnapshotLedger)


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
    unsigned: int = 0
    foreign: int = 0
    skipped_offsets: int = 0
    configs: int = 0
    configs_invalid: int = 0
    shadow_decisions: int = 0
    dead_lettered: int = 0
    batches_retried: int = 0
    states_unreadable: int = 0
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
        fleet_silence: SilenceRule = "declared",
    ) -> None:
        self._deployment = deployment
        self._default_registry = registry
        self._fleet_slot_s = fleet_slot_s
        self.decider = DecisionMaker(
            registry, store, pins=pins, keyring=keyring, metrics=metrics, fleet_silence=fleet_silence
        )
        self._keyring = keyring
        self._sink = sink
        self._partitions: dict[int, _Partition] = {}
        self._clock = clock
        self._metrics = metrics
        self.counters = PolicyCounters()
        self._foreign_logged: set[str] = set()

    @property
    def shadows(self) -> dict[str, ShadowPolicy]:
        """The shadow policies running, by name (of the lowest partition that runs each)."""
        found: dict[str, ShadowPolicy] = {}
        for _, part in sorted(self._partitions.items(), reverse=True):
            found.update(part.shadows)
        return found

    def partitions(self) -> list[int]:
        """The partitions whose state this handler holds."""
        return sorted(self._partitions)

    def policy_set(self, partition: int) -> PolicySet:
        """The live policy set that decides ``partition``'s snapshots now."""
        return self._partition(partition).policy_set

    def fleet_scopes(self, partition: int) -> list[str]:
        """Store scopes of the fleet aggregators that ``partition``'s live configuration registers."""
        self.decider.configure(self._partition(partition).policy_set)
        return self.decider.fleet_scopes()

    def ledger(self, partition: int) -> SnapshotLedger:
        """The snapshot ledger of one ``gov.estimates`` partition (empty when new)."""
        return self._partition(partition).ledger

    def state_scopes(self, configs: dict[str, str], fleet_partition: int | None) -> list[str]:
        """The store scopes ``restore`` needs besides the configs and ledgers: the shadows' and the fleet's.

        Args:
            configs: the stored configuration states of the partitions to restore, by store scope.
            fleet_partition: the ``fleet`` partition where this member owns it (its aggregators are
                restored), else None.
        """
        scopes: list[str] = []
        restored = {
            p: self._restored(p, state)
            for scope, state in configs.items()
            if (p := _scope_partition(CONFIG_STATE_SCOPE, scope)) is not None
        }
        for partition, part in sorted(restored.items()):
            scopes += [partition_scope(shadow.state_scope, partition) for shadow in part.shadows.values()]
        if fleet_partition is not None:
            fleet = restored.get(fleet_partition) or _Partition(PolicySet(registry=self._default_registry))
            self.decider.configure(fleet.policy_set)
            scopes += self.decider.fleet_scopes()
        return scopes

    def restore(self, states: dict[str, str]) -> None:
        """Return to ``states`` (as ``states()`` made them): configs, shadows, aggregators, ledgers; nothing staged.

        Only the partitions and aggregators ``states`` holds are kept: a member restored with the
        states of its partitions forgets those of partitions it no longer owns.
        """
        self.decider.discard_staged()
        self._partitions = {}
        for scope, state in states.items():
            partition = _scope_partition(CONFIG_STATE_SCOPE, scope)
            if partition is not None:
                part = self._restored(partition, state)
                for shadow in part.shadows.values():
                    shadow_scope = partition_scope(shadow.state_scope, partition)
                    shadow_state = states.get(shadow_scope)
                    if shadow_state is not None:
                        self._read_state(shadow_scope, partial(shadow.load, shadow_state))
                self._partitions[partition] = part
        for scope, state in states.items():
            partition = _scope_partition(LEDGER_STATE_SCOPE, scope)
            if partition is not None:
                ledger = self._read_state(scope, partial(SnapshotLedger.from_json, state))
                self._partition(partition).ledger = ledger if ledger is not None else SnapshotLedger()
        self.decider.aggregators.clear()
        for scope, state in states.items():
            if scope.startswith(FLEET_STATE_PREFIX):
                self._read_state(scope, partial(self.decider.load_aggregators, {scope: state}))

    def _read_state(self, scope: str, read: Callable[[], StateT]) -> StateT | None:
        """Run ``read`` over a stored state; one that cannot be read is reported, and None returned (start empty).

        A malformed value under one of the service's keys must never stop it: retrying cannot fix
        it, and every scope of the deployment would wait behind it. The next commit overwrites it.
        """
        try:
            return read()
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            self.counters.states_unreadable += 1
            if self._metrics is not None:
                self._metrics.stored_value_unreadable("service_state")
            log.warning("stored_state_unreadable", scope=scope, reason=repr(exc)[:300], action="start_empty")
            return None

    def reset_fleet_and_ledger(self, partition: int, *, fleet: bool) -> None:
        """Start a partition's snapshot ledger, and with ``fleet`` the fleet aggregators, empty (a log reset).

        The configs and shadows stay.
        """
        if fleet:
            self.decider.aggregators.clear()
        self._partition(partition).ledger = SnapshotLedger()

    def _partition(self, partition: int) -> _Partition:
        part = self._partitions.get(partition)
        if part is None:
            part = self._partitions[partition] = _Partition(PolicySet(registry=self._default_registry))
        return part

    def _restored(self, partition: int, configs_state: str) -> _Partition:
        """A partition's state rebuilt from its stored configurations (shadows without their documents yet)."""
        part = _Partition(PolicySet(registry=self._default_registry))
        records = self._read_state(config_scope(partition), partial(_config_records, configs_state))
        for record in records or []:
            self._apply_config(record, part, from_log=False)
        return part

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
        for partition in self._partitions:
            states |= self._partition_states(partition)
        return states

    def partition_states(self, partition: int, *, fleet: bool) -> dict[str, str]:
        """What ``states()`` holds of one partition; with ``fleet`` (it is the fleet's) the aggregators too."""
        states = self.decider.aggregator_states() if fleet else {}
        if partition in self._partitions:
            states |= self._partition_states(partition)
        return states

    def _partition_states(self, partition: int) -> dict[str, str]:
        part = self._partitions[partition]
        states = {
            config_scope(partition): json.dumps(
                {name: json.loads(record.model_dump_json()) for name, record in sorted(part.configs.items())}
            )
        }
        for shadow in part.shadows.values():
            states[partition_scope(shadow.state_scope, partition)] = shadow.state()
        states[ledger_scope(partition)] = part.ledger.to_json()
        return states

    def _apply_config(self, record: PolicyConfigRecord, part: _Partition, *, from_log: bool = True) -> None:
        """Decide ``part``'s snapshots with ``record`` from here on: the live configuration, or a shadow's.

        Only a record read from the log counts and is announced: one restored from the stored state
        (at every assignment, a broker-initiated rebalance included) was counted when it was read.
        """
        source = f"config record {record.name!r} ({record.source or 'no file'})"
        try:
            policy_set = config_policy_set(record.config, source=source, fleet_slot_s=self._fleet_slot_s)
        except InvalidInputError as exc:
            if from_log:
                self.counters.configs_invalid += 1
            log.warning("config_invalid", name=record.name, reason=str(exc))
            return
        if from_log:
            self.counters.configs += 1
        part.configs[record.name] = record
        if record.name == LIVE_CONFIG:
            part.policy_set = policy_set
        elif record.config is None:
            part.shadows.pop(record.name, None)
            del part.configs[record.name]
        elif record.name not in part.shadows or part.shadows[record.name].policy_set.digest != policy_set.digest:
            part.shadows[record.name] = ShadowPolicy(record.name, policy_set)
        if from_log:
            log.info("config_applied", name=record.name, digest=policy_set.digest, source=record.source)

    def handle(self, record: ConsumedRecord, batch: PendingBatch) -> None:
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
        part = self._partition(record.partition)
        if isinstance(parsed, PolicyConfigRecord):
            self._apply_config(parsed, part)
            return
        problem = self._signature_problem(parsed)
        if problem is not None:
            self.counters.unsigned += 1
            self._dead_letter(record, problem, "signature")
            return
        if parsed.scope != FLEET_SCOPE and not isinstance(parsed.estimates, (FleetContribution, FleetJoin)):
            verdict = part.ledger.check(parsed)
            if verdict.refused is not None:
                self.counters.inconsistent += 1
                self._dead_letter(record, verdict.refused, "version")
                return
            if verdict.resynced:
                log.warning("snapshot_ledger_resynced", scope=parsed.scope, version=parsed.version)
        self._snapshot(parsed, record, batch, part)

    def overdue(self) -> dict[tuple[str, str], tuple[int, int]]:
        """Each engine a fleet aggregator waits on from too far behind: (kind, engine) -> (its slot, the newest's).

        Only the member that owns the ``fleet`` partition holds aggregators, so only it finds any.
        """
        found: dict[tuple[str, str], tuple[int, int]] = {}
        for kind, aggregator in sorted(self.decider.aggregators.items()):
            newest = max(aggregator.watermarks.values(), default=0)
            for engine, slot in aggregator.overdue().items():
                found[(kind, engine)] = (slot, newest)
        return found

    def declare_silent(self, kind: str, engine: str, slots: tuple[int, int], waited_s: float) -> None:
        """Send a ``FleetSilence`` declaration to the ``fleet`` partition; it takes effect where it is read back.

        ``slots`` is the engine's last closed slot and the newest engine's, as ``overdue`` gave them.
        Going through the log rather than into the aggregator at once puts the declaration at one
        place in the fleet's order, the place every later reader (a rebuild, a new owner) meets it.
        """
        aggregator = self.decider.aggregators[kind]
        silence = FleetSilence(engine=engine, engine_slot=slots[0], fleet_slot=slots[1], waited_s=round(waited_s, 3))
        version = max(aggregator.version, 1)
        declaration = EstimateSnapshot(
            deployment=self._deployment,
            scope=FLEET_SCOPE,
            snapshot_id=snapshot_id(FLEET_SCOPE, version, silence),
            version=version,
            ts=(slots[1] + 1) * aggregator.slot_s,
            trigger=SnapshotTrigger(kind=kind, cause="silence"),
            estimates=silence,
        )
        self._sink.send(ESTIMATES_TOPIC, FLEET_SCOPE.encode(), self._signed(declaration))

    def _signed(self, fleet_snapshot: EstimateSnapshot) -> bytes:
        """The record value of a fleet snapshot this service closed: signed as its own where the deployment signs."""
        if self._keyring is not None:
            fleet_snapshot = sign_snapshot(fleet_snapshot, self._keyring.signing, "policy")
        return fleet_snapshot.model_dump_json().encode()

    def _signature_problem(self, snapshot: EstimateSnapshot) -> str | None:
        """Why ``snapshot`` is not taken as its producer's, where the deployment signs; else None.

        Engines' snapshots and fleet contributions must be the stream processor's, fleet snapshots
        this service's own. Checked before the snapshot ledger, so a forged snapshot is refused even
        before an engine's first genuine one, and nothing is decided (or signed) from it.
        """
        if self._keyring is None:
            return None
        producer: SnapshotProducer = "policy" if snapshot.scope == FLEET_SCOPE else "stream"
        problem = snapshot_signature_problem(snapshot, self._keyring, producer)
        if problem is None:
            return None
        return f"snapshot not validly signed by the {producer} service ({problem})"

    def _snapshot(
        self, snapshot: EstimateSnapshot, record: ConsumedRecord, batch: PendingBatch, part: _Partition
    ) -> None:
        self.counters.snapshots += 1
        self.decider.configure(part.policy_set)
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
            log.warning("decision_failed", scope=snapshot.scope, trigger=str(snapshot.trigger), error=repr(exc)[:300])
            self._dead_letter(record, f"decision failed: {type(exc).__name__}: {exc}", None)
            return
        for fleet_snapshot in handled.fleet_snapshots:
            self.counters.fleet_snapshots += 1
            self._sink.send(ESTIMATES_TOPIC, b"fleet", self._signed(fleet_snapshot))
        for decision in handled.records:
            self._record(decision, batch.started_s)
        batch.writes.extend(handled.writes)
        for shadow in part.shadows.values():
            try:
                shadow_records = shadow.on_snapshot(snapshot, handled.fleet_snapshots)
            except Exception as exc:  # a shadow's failure never touches the live policy
                log.warning(
                    "shadow_decision_failed",
                    shadow=shadow.name,
                    scope=snapshot.scope,
                    trigger=str(snapshot.trigger),
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

    def _dead_letter(self, record: ConsumedRecord, reason: str, field_name: str | None) -> None:
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
