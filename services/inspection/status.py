"""What every engine of a deployment is told, read from Redis and Kafka: the data of ``governor status``.

Per engine: its estimates' freshness (the event time of its last folded event, and how far that
lies behind the deployment's newest) and the current document of each policy kind with its
version, age, validity, watched values (services/watched_values.py) and the engine's last
acknowledgement. Ages are event time, measured on the engine's own clock, the clock an engine
compares ``valid_until`` with: ``age_s`` is the engine's last event time minus the document's
``computed_at``, and ``valid_for_s`` what is left until its ``valid_until`` (negative: the
engine has fallen back to the policy's safe defaults). Fleet-scope documents are aged on the
deployment's newest event time. Consumer lag is what each service has applied (its offsets in
Redis, the offsets that count) against the ends of the topic it reads.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

import redis
from pydantic import ValidationError

from schemas.errors import BackendUnavailableError, InvalidInputError
from schemas.estimates import EngineSummary
from schemas.names import (
    ESTIMATES_TOPIC,
    OFFSETS_PATTERN,
    TELEMETRY_TOPIC,
    Partition,
    ack_of_key,
    ack_pattern,
    deployment_of_offsets_key,
    estimate_pattern,
    estimate_scope_of,
    offsets_key,
    policy_of_key,
    policy_pattern,
)
from services.inspection.scaling import PoolStatus, collect_pool_status
from services.kafka_clients import reader, require_topic
from services.kafka_security import PLAINTEXT
from services.settings import KafkaSecurity, RedisSecurity
from services.store.redis_store import redis_client
from services.watched_values import parse_document, watched_values

SERVICE_TOPICS = (("stream", TELEMETRY_TOPIC), ("policy", ESTIMATES_TOPIC))
SUMMARY_NAME = "summary"  # the engines are those with a summary; their states and the services' are not listed


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyStatus:
    """The current document of one kind for one scope, and how its engine stands with it."""

    kind: str
    scope: str
    version: int
    computed_at: float
    valid_until: float
    age_s: float | None
    valid_for_s: float | None
    values: dict[str, float]
    shown: str
    acked_version: int | None
    ack_lag: int | None
    acked_by: int


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineStatus:
    """One engine: its estimates' freshness and its documents."""

    engine: str
    scheduler: str | None
    event_ts: float | None
    behind_s: float | None
    events_folded: int
    policies: list[PolicyStatus]


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerStatus:
    """One service's progress through the topic it reads."""

    service: str
    topic: str
    applied_records: int
    end_records: int
    lag: int


@dataclass(frozen=True, slots=True, kw_only=True)
class StatusReport:
    """Everything ``governor status`` shows for one deployment."""

    deployment: str
    newest_event_ts: float | None
    engines: list[EngineStatus]
    fleet: list[PolicyStatus]
    consumers: list[ConsumerStatus]
    pools: list[PoolStatus] = field(default_factory=list)

    def to_json(self) -> str:
        """Return the report as indented JSON (``governor status --json``)."""
        return json.dumps(asdict(self), indent=2, sort_keys=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class _EngineClock:
    """What status reads of an engine's estimate summary: its last event time, scheduler and event count."""

    ts: float | None
    scheduler: str | None
    events_folded: int

    @classmethod
    def of(cls, raw: str) -> _EngineClock:
        """Read the engine's ``EngineSummary``; one it cannot read (another format) shows as unknown."""
        try:
            summary = EngineSummary.model_validate_json(raw)
        except ValidationError:
            return cls(ts=None, scheduler=None, events_folded=0)
        return cls(
            ts=summary.ts_s,
            scheduler=None if summary.engine is None else summary.engine.scheduler,
            events_folded=summary.events_folded,
        )


def _text(value: bytes | str) -> str:
    """A Redis reply as text (the client returns bytes unless built to decode)."""
    return value.decode() if isinstance(value, bytes) else value


class _RedisReader:
    """The few Redis reads status makes, each failure translated into ``BackendUnavailableError``."""

    def __init__(self, url: str, timeout_s: float, security: RedisSecurity | None) -> None:
        self._url = url
        self._client = redis_client(url, timeout_s, security)

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()

    def keys(self, pattern: str) -> list[str]:
        """Every key matching ``pattern``, sorted (SCAN, never KEYS)."""
        try:
            return sorted(_text(key) for key in self._client.scan_iter(match=pattern, count=1000))
        except redis.RedisError as exc:
            raise self._unavailable("SCAN", exc) from exc

    def values(self, keys: list[str]) -> dict[str, str]:
        """The values of ``keys`` that exist."""
        if not keys:
            return {}
        try:
            raw = self._client.mget(keys)
        except redis.RedisError as exc:
            raise self._unavailable("MGET", exc) from exc
        return {key: _text(value) for key, value in zip(keys, raw, strict=True) if value is not None}

    def offsets(self, key: str) -> dict[str, int]:
        """A hash of applied offsets, ``topic:partition -> offset``."""
        try:
            raw = self._client.hgetall(key)
        except redis.RedisError as exc:
            raise self._unavailable("HGETALL", exc) from exc
        return {_text(field): int(value) for field, value in raw.items()}

    def _unavailable(self, what: str, exc: redis.RedisError) -> BackendUnavailableError:
        msg = f"redis at {self._url} did not answer ({what}: {exc})"
        return BackendUnavailableError(msg, backend="redis")


def known_deployments(reader: _RedisReader) -> list[str]:
    """Deployments that have keys in Redis (any service committed offsets for them)."""
    return sorted({d for key in reader.keys(OFFSETS_PATTERN) if (d := deployment_of_offsets_key(key)) is not None})


def _policy_status(
    kind: str, scope: str, raw: str, reference_ts: float | None, acks: dict[tuple[str, str], int], *, engine: bool
) -> PolicyStatus:
    """One document's status; an engine-scope document counts its engine's ack, a fleet one every engine's."""
    document = parse_document(kind, raw)
    values = watched_values(document)
    acked = acks.get((kind, scope)) if engine else None
    acked_by = sum(
        1
        for (k, e), version in acks.items()
        if k == kind and version == document.version and (e == scope or not engine)
    )
    return PolicyStatus(
        kind=kind,
        scope=scope,
        version=document.version,
        computed_at=document.computed_at,
        valid_until=document.valid_until,
        age_s=None if reference_ts is None else reference_ts - document.computed_at,
        valid_for_s=None if reference_ts is None else document.valid_until - reference_ts,
        values={v.name: v.value for v in values},
        shown="  ".join(v.shown for v in values),
        acked_version=acked,
        ack_lag=None if acked is None else document.version - acked,
        acked_by=acked_by,
    )


def _acks(reader: _RedisReader, deployment: str) -> dict[tuple[str, str], int]:
    """(kind, engine) -> the version the engine last acknowledged as applied."""
    acks: dict[tuple[str, str], int] = {}
    for key, raw in reader.values(reader.keys(ack_pattern(deployment))).items():
        pair = ack_of_key(deployment, key)
        ack = json.loads(raw)
        if pair is not None and ack.get("applied", True):
            acks[pair] = int(ack["version"])
    return acks


def consumer_status(
    bootstrap: str, applied: dict[str, dict[str, int]], timeout_s: float, security: KafkaSecurity = PLAINTEXT
) -> list[ConsumerStatus]:
    """Each service's applied records against the ends of its topic (``applied``: service -> offsets hash)."""
    consumer = reader(bootstrap, timeout_s=timeout_s, security=security)
    try:
        found = []
        for service, topic in SERVICE_TOPICS:
            partitions = require_topic(consumer, topic, bootstrap)
            ends = consumer.end_offsets(partitions)
            offsets = applied.get(service, {})
            done = {tp: offsets.get(Partition(tp.topic, tp.partition).field, -1) + 1 for tp in partitions}
            # Per partition and never below 0: the Tansu broker reports an end offset that can trail
            # the last record's offset + 1 (by the records of its last batch); Kafka's is exact.
            lag = sum(max(0, int(ends[tp]) - done[tp]) for tp in partitions)
            found.append(
                ConsumerStatus(
                    service=service,
                    topic=topic,
                    applied_records=sum(done.values()),
                    end_records=sum(int(ends[tp]) for tp in partitions),
                    lag=lag,
                )
            )
        return found
    finally:
        consumer.close()


def collect_status(
    redis_url: str,
    bootstrap: str,
    deployment: str,
    *,
    redis_timeout_s: float,
    kafka_timeout_s: float,
    redis_security: RedisSecurity | None = None,
    kafka_security: KafkaSecurity = PLAINTEXT,
) -> StatusReport:
    """Read the deployment's estimates, documents and acks from Redis and its consumers' lag from Kafka.

    Raises:
        InvalidInputError: the deployment has no keys in Redis (the message lists those that do).
        BackendUnavailableError: Redis or the broker does not answer.
    """
    reader = _RedisReader(redis_url, redis_timeout_s, redis_security)
    try:
        summaries = reader.values(reader.keys(estimate_pattern(deployment, SUMMARY_NAME)))
        documents = reader.values(reader.keys(policy_pattern(deployment)))
        applied = {service: reader.offsets(offsets_key(deployment, service)) for service, _topic in SERVICE_TOPICS}
        if not summaries and not documents and not any(applied.values()):
            others = ", ".join(known_deployments(reader)) or "none"
            msg = f"deployment {deployment!r} has no keys in redis at {redis_url} (deployments found: {others})"
            raise InvalidInputError(msg, field="deployment", value=deployment)
        acks = _acks(reader, deployment)
    finally:
        reader.close()
    clocks = {
        engine: _EngineClock.of(raw)
        for key, raw in summaries.items()
        if (engine := estimate_scope_of(deployment, SUMMARY_NAME, key)) is not None
    }
    times = [c.ts for c in clocks.values() if c.ts is not None]
    newest = max(times) if times else None
    by_scope: dict[str, list[PolicyStatus]] = {}
    for key, raw in documents.items():
        of_key = policy_of_key(deployment, key)
        if of_key is None:
            continue
        kind, scope = of_key
        reference = clocks[scope].ts if scope in clocks else newest
        status = _policy_status(kind, scope, raw, reference, acks, engine=scope in clocks)
        by_scope.setdefault(scope, []).append(status)
    engines = [
        EngineStatus(
            engine=engine,
            scheduler=clock.scheduler,
            event_ts=clock.ts,
            behind_s=None if newest is None or clock.ts is None else newest - clock.ts,
            events_folded=clock.events_folded,
            policies=sorted(by_scope.pop(engine, []), key=lambda p: p.kind),
        )
        for engine, clock in sorted(clocks.items())
    ]
    fleet = sorted((p for scoped in by_scope.values() for p in scoped), key=lambda p: (p.kind, p.scope))
    return StatusReport(
        deployment=deployment,
        newest_event_ts=newest,
        engines=engines,
        fleet=fleet,
        consumers=consumer_status(bootstrap, applied, kafka_timeout_s, kafka_security),
        pools=collect_pool_status(bootstrap, deployment, timeout_s=kafka_timeout_s, security=kafka_security),
    )
