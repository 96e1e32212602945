"""Topic names and Redis key builders: the names are part of the product (DESIGN section 5).

Every Redis key of a deployment starts with ``gov:{deployment}:`` followed by one fixed namespace
segment (``est``, ``service-state``, ``policy``, ``policy-history``, ``pin``, ``ack``, ``offsets``,
``log-ids``, ``policy-updates``); only these builders spell them. Every part a builder takes from
outside (a deployment, an engine id, a policy kind or scope) must match ``IDENTIFIER_PATTERN``, which
has no ``:``: so a part can never spill into the next segment, every key has a fixed number of
segments after its namespace, and no identifier can make one key equal another (an engine named
``policy-config`` or ``x:history`` used to share a key with the policy service's state or another
engine's history; docs/contracts.md, "Identifiers and key namespaces"). A builder given another part
raises ``InvalidInputError`` instead of building a key that could collide.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import NamedTuple

from schemas.errors import InvalidInputError
from schemas.policy_docs.base import SourceOffset

IDENTIFIER_PATTERN = r"^[A-Za-z0-9_@-]+(?:\.[A-Za-z0-9_@-]+)*$"
_IDENTIFIER = re.compile(IDENTIFIER_PATTERN)
RESERVED_SCOPES = frozenset({"fleet"})  # scopes of the control plane's own; never an engine id

STREAM_CONSUMER = "stream"
POLICY_CONSUMER = "policy"

TELEMETRY_TOPIC = "gov.telemetry"
ESTIMATES_TOPIC = "gov.estimates"
DECISIONS_TOPIC = "gov.policy.decisions"
DEADLETTER_TOPIC = "gov.deadletter"
CHECKPOINTS_TOPIC = "gov.checkpoints"
CHECKPOINT_MAX_BYTES = 16 * 1024 * 1024  # its largest record, one partition's states (Kafka's default: 1 MiB)


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicSpec:
    """A topic and the partition count the stack creates it with."""

    name: str
    partitions: int


TOPICS: tuple[TopicSpec, ...] = (
    TopicSpec(name=TELEMETRY_TOPIC, partitions=8),
    TopicSpec(name=ESTIMATES_TOPIC, partitions=1),
    TopicSpec(name=DECISIONS_TOPIC, partitions=1),
    TopicSpec(name=DEADLETTER_TOPIC, partitions=1),
    TopicSpec(name=CHECKPOINTS_TOPIC, partitions=1),
)


class Partition(NamedTuple):
    """One Kafka partition: its topic and number.

    A tuple, so it equals (and hashes as) kafka-python's ``TopicPartition`` and faust's ``TP`` of the
    same partition. ``field`` spells it ``topic:partition``, the field of the applied-offsets and
    log-ids hashes (``offsets_key``, ``log_ids_key``) and what logs name it by; ``parse`` reads that
    back. No other code formats or splits the string.
    """

    topic: str
    partition: int

    @property
    def field(self) -> str:
        """``topic:partition``, as the Redis hashes and the logs spell it."""
        return f"{self.topic}:{self.partition}"

    @classmethod
    def parse(cls, field: str) -> Partition:
        """Read ``topic:partition`` (the topic ends at the last ``:``).

        Raises:
            InvalidInputError: no topic, or the number after the last ``:`` is not a non-negative integer.
        """
        topic, colon, number = field.rpartition(":")
        if not colon or not topic or not (number.isascii() and number.isdigit()):
            msg = f"a partition field reads 'topic:partition', got {field[:200]!r}"
            raise InvalidInputError(msg, field="partition", value=field)
        return cls(topic, int(number))


@functools.lru_cache(maxsize=4096)
def partition_field(topic: str, partition: int) -> str:
    """``Partition(topic, partition).field``, memoised for the paths that spell every record's partition.

    A consumer reads a handful of partitions, and formatting the string anew for each record cost
    more than its fold's bookkeeping (the stream processor spelled it five times a record).
    """
    return Partition(topic, partition).field


class RecordPosition(NamedTuple):
    """Where one record was read: its topic, partition and offset.

    What the fold keeps per engine and partition (``fold.folder.Folder``). A tuple rather than the
    contract's ``SourceOffset`` model, which a snapshot's ``offsets`` carry: validating a model for
    every record folded cost the stream processor about 5 % of its ingest, and the fold builds one
    only for the positions a snapshot names.
    """

    topic: str
    partition: int
    offset: int

    @property
    def field(self) -> str:
        """The partition's ``topic:partition``, as ``Partition.field`` spells it."""
        return partition_field(self.topic, self.partition)

    def source_offset(self) -> SourceOffset:
        """The contract's ``SourceOffset`` of this position, for a snapshot's ``offsets``."""
        return SourceOffset(topic=self.topic, partition=self.partition, offset=self.offset)


def key_part(value: str, what: str) -> str:
    """Return ``value`` when it may be part of a key: an identifier without ``:``, ``/`` or ``..``.

    Raises:
        InvalidInputError: ``value`` does not match ``IDENTIFIER_PATTERN``.
    """
    if _IDENTIFIER.fullmatch(value) is None:
        msg = f"{what} must match {IDENTIFIER_PATTERN} to be part of a Redis key, got {value!r}"
        raise InvalidInputError(msg, field=what, value=value)
    return value


def _namespace(deployment: str, segment: str) -> str:
    return f"gov:{key_part(deployment, 'deployment')}:{segment}"


def estimate_key(deployment: str, scope: str, name: str) -> str:
    """Key of one estimate of an engine: ``gov:{deployment}:est:{scope}:{name}``."""
    return f"{_namespace(deployment, 'est')}:{key_part(scope, 'scope')}:{key_part(name, 'name')}"


def estimate_pattern(deployment: str, name: str) -> str:
    """SCAN pattern of every engine's estimate ``name``: ``gov:{deployment}:est:*:{name}``."""
    return f"{_namespace(deployment, 'est')}:*:{key_part(name, 'name')}"


def estimate_scope_of(deployment: str, name: str, key: str) -> str | None:
    """The engine scope of an estimate key ``name`` (as ``estimate_key`` builds it), or None for any other key."""
    prefix, suffix = f"{_namespace(deployment, 'est')}:", f":{name}"
    if not (key.startswith(prefix) and key.endswith(suffix)) or len(key) <= len(prefix) + len(suffix):
        return None
    scope = key[len(prefix) : -len(suffix)]
    return scope if _IDENTIFIER.fullmatch(scope) is not None else None


def policy_pattern(deployment: str) -> str:
    """SCAN pattern of every current policy document: ``gov:{deployment}:policy:*``."""
    return f"{_namespace(deployment, 'policy')}:*"


def policy_of_key(deployment: str, key: str) -> tuple[str, str] | None:
    """The (kind, scope) of a policy key (as ``policy_key`` builds it), or None for any other key."""
    return _pair_of_key(f"{_namespace(deployment, 'policy')}:", key)


def ack_pattern(deployment: str) -> str:
    """SCAN pattern of every engine's last acknowledgement: ``gov:{deployment}:ack:*``."""
    return f"{_namespace(deployment, 'ack')}:*"


def ack_of_key(deployment: str, key: str) -> tuple[str, str] | None:
    """The (kind, engine id) of an acknowledgement key (as ``ack_key`` builds it), or None for any other key."""
    return _pair_of_key(f"{_namespace(deployment, 'ack')}:", key)


def _pair_of_key(prefix: str, key: str) -> tuple[str, str] | None:
    """The two identifiers after ``prefix`` in ``key`` (``{prefix}{first}:{second}``), or None when it is not so."""
    if not key.startswith(prefix):
        return None
    first, _, second = key[len(prefix) :].partition(":")
    if _IDENTIFIER.fullmatch(first) is None or _IDENTIFIER.fullmatch(second) is None:
        return None
    return first, second


def state_key(deployment: str, consumer: str, scope: str) -> str:
    """Key of one state a consumer commits with its offsets.

    The stream processor's states are its engines' estimator states, ``gov:{deployment}:est:{engine}:state``
    (``scope`` is the engine id). Every other consumer's states are its own and live in a namespace no
    engine id reaches, ``gov:{deployment}:service-state:{consumer}:{scope}``; there ``scope`` is a name the
    service chose (``policy-ledger``, ``fleet-fleetopt``, ``policy-config:3``, ...), after the last fixed segment.
    Before that namespace, those shared the engines' layout; ``legacy_state_key`` names where they were.
    """
    if consumer == STREAM_CONSUMER:
        return estimate_key(deployment, scope, "state")
    return f"{_namespace(deployment, 'service-state')}:{key_part(consumer, 'consumer')}:{scope}"


def legacy_state_key(deployment: str, scope: str) -> str:
    """Where the policy service kept its state ``scope`` in the old layout: ``gov:{deployment}:est:{scope}:state``.

    The engines' layout, which an engine named ``policy-config`` shared. Nothing writes it any more;
    the policy service reads it once, on its first start after the upgrade, for the partitions whose
    state is there only (services/policy/stored_states.py). ``scope`` is the service's own
    (``policy-ledger:3`` keeps its ``:``, as the old release spelled it), so it is not checked as
    an identifier.
    """
    return f"{_namespace(deployment, 'est')}:{scope}:state"


def policy_key(deployment: str, kind: str, scope: str) -> str:
    """Key of the current policy document: ``gov:{deployment}:policy:{kind}:{scope}``."""
    return f"{_namespace(deployment, 'policy')}:{key_part(kind, 'kind')}:{key_part(scope, 'scope')}"


def policy_history_key(deployment: str, kind: str, scope: str) -> str:
    """Key of the capped history list of a policy: ``gov:{deployment}:policy-history:{kind}:{scope}``."""
    return f"{_namespace(deployment, 'policy-history')}:{key_part(kind, 'kind')}:{key_part(scope, 'scope')}"


def policy_channel(deployment: str) -> str:
    """Pub/sub channel announcing new policy versions: ``gov:{deployment}:policy-updates``."""
    return _namespace(deployment, "policy-updates")


def pin_key(deployment: str, kind: str, scope: str) -> str:
    """Key of an operator's pin on a policy, expiring with it: ``gov:{deployment}:pin:{kind}:{scope}``."""
    return f"{_namespace(deployment, 'pin')}:{key_part(kind, 'kind')}:{key_part(scope, 'scope')}"


def ack_key(deployment: str, kind: str, engine_id: str) -> str:
    """Key of an engine's last acknowledgement: ``gov:{deployment}:ack:{kind}:{engine_id}``."""
    return f"{_namespace(deployment, 'ack')}:{key_part(kind, 'kind')}:{key_part(engine_id, 'engine_id')}"


def offsets_key(deployment: str, consumer: str) -> str:
    """Hash of applied Kafka offsets per ``topic:partition``: ``gov:{deployment}:offsets:{consumer}``."""
    return f"{_namespace(deployment, 'offsets')}:{key_part(consumer, 'consumer')}"


OFFSETS_PATTERN = "gov:*:offsets:*"  # SCAN pattern of every deployment's applied offsets


def deployment_of_offsets_key(key: str) -> str | None:
    """The deployment of an applied-offsets key (as ``offsets_key`` builds it), or None for any other key."""
    parts = key.split(":")
    if len(parts) != 4 or parts[0] != "gov" or parts[2] != "offsets" or _IDENTIFIER.fullmatch(parts[1]) is None:
        return None
    return parts[1]


def log_ids_key(deployment: str, consumer: str) -> str:
    """Hash of the topic id of the log each applied offset refers to, per ``topic:partition``.

    ``gov:{deployment}:log-ids:{consumer}``: a partition whose topic id changed (the topic was
    recreated, or a broker without durable storage restarted) is a new log, and its applied offset
    means nothing there (docs/operations.md, "Log resets").
    """
    return f"{_namespace(deployment, 'log-ids')}:{key_part(consumer, 'consumer')}"
