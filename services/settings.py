"""The one ``Settings`` object: flag over environment over default, built once at the entry point.

Only this module reads the environment. Environment names are ``GOVERNOR_<FIELD>`` in upper case,
plus ``REDIS_URL``, which DESIGN fixes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from fold.folder import REGISTRATION_GRACE_S
from schemas.errors import ConfigError
from schemas.names import IDENTIFIER_PATTERN
from schemas.signing import PolicyKeyring, SigningKey

ENV_PREFIX = "GOVERNOR_"
ENV_ALIASES = {"redis_url": "REDIS_URL"}
SECRET_FIELDS = frozenset(
    {
        "redis_password",
        "kafka_sasl_password",
        "policy_signing_key",
        "policy_previous_signing_key",
        "gateway_admin_token",
    }
)


@dataclass(frozen=True, slots=True, kw_only=True)
class KafkaClientTimeouts:
    """The Kafka client timeouts that depend on the broker (services/kafka_clients.py), milliseconds.

    Attributes:
        max_poll_interval_ms: a group member's rebalance timeout; kafka-python joins a group on the
            Tansu broker only after it, so the local broker wants it short.
        session_timeout_ms: how long the group coordinator waits for a heartbeat.
        heartbeat_interval_ms: how often a member heartbeats.
        fetch_max_wait_ms: how long the broker may hold a fetch with no data while records flow; a
            consumer loop idle for a second lets it hold up to 1000 ms (services/kafka_clients.py,
            ``IdlePace``). The local default, 10 ms, was set when Tansu held a fetch whole even when
            data arrived, so that it bounded the event-to-decision latency; the bundled Tansu 0.6.0
            answered a fetch held for 1000 ms within 6-85 ms of a record's arrival (2026-11-28), as
            Apache Kafka does, which the idle pace relies on.
        linger_ms: how long a producer waits to batch records.
        idempotent_producer: whether the control plane's producer is idempotent (it always asks for
            ``acks=all``). Apache Kafka keeps producer state in its log, so an idempotent producer
            rides out a broker restart; Tansu grants producer ids but forgets them when it restarts
            without its log, after which the producer's next batch is refused as out of sequence and
            Tansu fails the producer's new InitProducerId, so every later record is lost.
    """

    max_poll_interval_ms: int
    session_timeout_ms: int
    heartbeat_interval_ms: int
    fetch_max_wait_ms: int
    linger_ms: int
    idempotent_producer: bool


CHECKPOINT_INTERVAL_S = 300.0  # a rebuild on an expired log replays at most this much wall time past its checkpoint
FLEET_SILENCE_WAIT_S = 60.0  # above Apache Kafka's 45 s session timeout: a dead member's partitions move first


LOCAL_BROKER_TIMEOUTS = KafkaClientTimeouts(
    max_poll_interval_ms=5000,
    session_timeout_ms=6000,
    heartbeat_interval_ms=1000,
    fetch_max_wait_ms=10,
    linger_ms=2,
    idempotent_producer=False,
)
APACHE_KAFKA_TIMEOUTS = KafkaClientTimeouts(  # the Apache Kafka clients' own defaults (docker-compose.yml sets them)
    max_poll_interval_ms=300_000,
    session_timeout_ms=45_000,
    heartbeat_interval_ms=3000,
    fetch_max_wait_ms=500,
    linger_ms=5,
    idempotent_producer=True,
)


# Apache Kafka's default group.min.session.timeout.ms and group.max.session.timeout.ms: a member asking for a
# session timeout outside them is refused at JoinGroup (INVALID_SESSION_TIMEOUT), so such a setting is refused
# here, where the message can name it, rather than by every service at its first join.
KAFKA_MIN_SESSION_TIMEOUT_MS = 6000
KAFKA_MAX_SESSION_TIMEOUT_MS = 1_800_000
ENGINE_RETENTION_S = 7 * 86_400.0
STREAM_COMMIT_INTERVAL_S = 1.0  # the stream processor's longest wait between commits (docs/operations.md)


@dataclass(frozen=True, slots=True)
class EngineLifecycle:
    """When an engine starts to count for the control plane, and when its state is forgotten.

    Attributes:
        registration_grace_s: event time after an unregistered engine's first event before it counts.
        retention_s: how long an engine's estimates outlive its last event (event time in memory,
            a time to live on its Redis keys).
    """

    registration_grace_s: float = REGISTRATION_GRACE_S
    retention_s: float = ENGINE_RETENTION_S


DEFAULT_LIFECYCLE = EngineLifecycle()


class EnvSettings(BaseModel):
    """Settings read as flag over environment over default; subclasses list the fields."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @classmethod
    def load(cls, flags: Mapping[str, object] | None = None, environ: Mapping[str, str] | None = None) -> Self:
        """Build settings from explicit flags (None values ignored) over the environment over defaults.

        Raises:
            ConfigError: a value fails validation; the message names the field, the value and its source.
        """
        values: dict[str, object] = {}
        sources: dict[str, str] = {}
        env = environ if environ is not None else os.environ
        for name in cls.model_fields:
            env_name = ENV_ALIASES.get(name, ENV_PREFIX + name.upper())
            if env_name in env:
                values[name] = env[env_name]
                sources[name] = f"environment {env_name}"
        for name, value in (flags or {}).items():
            if value is not None and name in cls.model_fields:
                values[name] = value
                sources[name] = f"flag --{name.replace('_', '-')}"
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            field = ".".join(str(p) for p in first["loc"])
            if not field:
                raise ConfigError(f"settings: {first['msg'].removeprefix('Value error, ')}") from exc
            shown = "**********" if field in SECRET_FIELDS else values.get(field)
            msg = f"{field}={shown!r} from {sources.get(field, 'default')}: {first['msg']}"
            raise ConfigError(msg) from exc


KafkaSecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
KafkaSaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


@dataclass(frozen=True, slots=True)
class RedisSecurity:
    """How to authenticate to Redis (AUTH or an ACL user) and verify it over TLS (``rediss://`` URLs)."""

    username: str | None = None
    password: SecretStr | None = None
    tls_ca_file: Path | None = None
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None


@dataclass(frozen=True, slots=True)
class KafkaSecurity:
    """How to reach the Kafka brokers: protocol, SASL mechanism and credentials, TLS files."""

    protocol: KafkaSecurityProtocol = "PLAINTEXT"
    sasl_mechanism: KafkaSaslMechanism | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    tls_ca_file: Path | None = None
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None


class SecuritySettings(EnvSettings):
    """Credentials, TLS files and the policy signing keys, shared by the services, the CLI and engines.

    Secrets are ``SecretStr``: they show as ``**********`` in every repr, dump and log line. Where
    no key or password is set, the transport and the documents are unprotected, as docs/security.md says.
    """

    redis_username: str | None = Field(default=None, min_length=1, description="Redis ACL user (AUTH username)")
    redis_password: SecretStr | None = Field(default=None, description="Redis password (AUTH); a secret")
    redis_tls_ca_file: Path | None = Field(default=None, description="CA bundle that signs the Redis TLS certificate")
    redis_tls_cert_file: Path | None = Field(default=None, description="client certificate for Redis TLS")
    redis_tls_key_file: Path | None = Field(default=None, description="private key of the Redis client certificate")
    kafka_security_protocol: KafkaSecurityProtocol = Field(default="PLAINTEXT", description="Kafka security protocol")
    kafka_sasl_mechanism: KafkaSaslMechanism | None = Field(default=None, description="Kafka SASL mechanism")
    kafka_sasl_username: str | None = Field(default=None, min_length=1, description="Kafka SASL user")
    kafka_sasl_password: SecretStr | None = Field(default=None, description="Kafka SASL password; a secret")
    kafka_tls_ca_file: Path | None = Field(
        default=None, description="CA bundle that signs the Kafka brokers' certificates"
    )
    kafka_tls_cert_file: Path | None = Field(default=None, description="client certificate for Kafka TLS")
    kafka_tls_key_file: Path | None = Field(default=None, description="private key of the Kafka client certificate")
    policy_signing_key: SecretStr | None = Field(
        default=None, min_length=16, description="HMAC key policy documents are signed and verified with; a secret"
    )
    policy_signing_key_id: str = Field(default="1", min_length=1, max_length=64, description="id of the signing key")
    policy_previous_signing_key: SecretStr | None = Field(
        default=None, min_length=16, description="a retired key engines still accept while keys rotate; a secret"
    )
    policy_previous_signing_key_id: str | None = Field(
        default=None, min_length=1, max_length=64, description="id of the retired key"
    )

    @field_validator(
        "redis_username",
        "redis_password",
        "redis_tls_ca_file",
        "redis_tls_cert_file",
        "redis_tls_key_file",
        "kafka_sasl_mechanism",
        "kafka_sasl_username",
        "kafka_sasl_password",
        "kafka_tls_ca_file",
        "kafka_tls_cert_file",
        "kafka_tls_key_file",
        "policy_signing_key",
        "policy_previous_signing_key",
        "policy_previous_signing_key_id",
        mode="before",
    )
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        """An empty value is no value (compose passes ``${GOVERNOR_REDIS_PASSWORD:-}`` through as "")."""
        return None if value == "" else value

    @model_validator(mode="after")
    def _check_security(self) -> Self:
        if self.kafka_security_protocol.startswith("SASL_") and not (
            self.kafka_sasl_mechanism and self.kafka_sasl_username and self.kafka_sasl_password
        ):
            msg = f"kafka_security_protocol {self.kafka_security_protocol} needs a SASL mechanism, user and password"
            raise ValueError(msg)
        for side in ("redis", "kafka"):
            cert, key = getattr(self, f"{side}_tls_cert_file"), getattr(self, f"{side}_tls_key_file")
            if (cert is None) != (key is None):
                msg = f"{side}_tls_cert_file and {side}_tls_key_file go together"
                raise ValueError(msg)
        if (self.policy_previous_signing_key is None) != (self.policy_previous_signing_key_id is None):
            msg = "policy_previous_signing_key and policy_previous_signing_key_id go together"
            raise ValueError(msg)
        if self.policy_previous_signing_key is not None and self.policy_signing_key is None:
            msg = "policy_previous_signing_key is set without a policy_signing_key"
            raise ValueError(msg)
        if self.policy_previous_signing_key_id == self.policy_signing_key_id:
            msg = "policy_previous_signing_key_id must differ from policy_signing_key_id"
            raise ValueError(msg)
        return self

    def redis_security(self) -> RedisSecurity:
        """The Redis credentials and TLS files, for ``services.store.redis_store.redis_client``."""
        return RedisSecurity(
            username=self.redis_username,
            password=self.redis_password,
            tls_ca_file=self.redis_tls_ca_file,
            tls_cert_file=self.redis_tls_cert_file,
            tls_key_file=self.redis_tls_key_file,
        )

    def kafka_security(self) -> KafkaSecurity:
        """The Kafka protocol, SASL credentials and TLS files, for ``services.kafka_clients``."""
        return KafkaSecurity(
            protocol=self.kafka_security_protocol,
            sasl_mechanism=self.kafka_sasl_mechanism,
            sasl_username=self.kafka_sasl_username,
            sasl_password=self.kafka_sasl_password,
            tls_ca_file=self.kafka_tls_ca_file,
            tls_cert_file=self.kafka_tls_cert_file,
            tls_key_file=self.kafka_tls_key_file,
        )

    def policy_keyring(self) -> PolicyKeyring | None:
        """The signing keys, or None where documents are neither signed nor verified."""
        if self.policy_signing_key is None:
            return None
        previous = None
        if self.policy_previous_signing_key is not None and self.policy_previous_signing_key_id is not None:
            previous = SigningKey(
                self.policy_previous_signing_key_id, self.policy_previous_signing_key.get_secret_value().encode()
            )
        signing = SigningKey(self.policy_signing_key_id, self.policy_signing_key.get_secret_value().encode())
        return PolicyKeyring(signing=signing, previous=previous)


class Settings(SecuritySettings):
    """Runtime settings of every Governor service and command."""

    deployment: str = Field(
        default="local", min_length=1, max_length=128, pattern=IDENTIFIER_PATTERN, description="deployment name"
    )
    kafka_bootstrap: str = Field(default="127.0.0.1:19092", description="Kafka bootstrap servers, host:port[,...]")
    redis_url: str = Field(default="redis://127.0.0.1:6379/0", description="Redis URL (env REDIS_URL)")
    state_dir: Path = Field(default=Path(".governor"), description="where the local stack keeps its state file")
    broker: Literal["tansu", "kafka"] = Field(
        default="tansu",
        description="the broker `governor stack up` and the test fixtures start: tansu (in memory, no Java) or kafka "
        "(Apache Kafka 4.x, its log under state_dir; needs java and `bash ops/install.sh --kafka`)",
    )
    log_format: Literal["json", "console"] = Field(default="console", description="log renderer")
    log_level: Literal["debug", "info", "warning", "error"] = Field(default="info", description="lowest level logged")
    redis_timeout_s: float = Field(default=2.0, gt=0.0, description="timeout of each Redis call, seconds")
    kafka_timeout_s: float = Field(default=10.0, gt=0.0, description="timeout of Kafka admin and flush, seconds")
    seed: int | None = Field(
        default=None,
        ge=0,
        description="seed of the simulated workload of governor demo and governor sim; unset: the scenario's own",
    )
    metrics_port: int = Field(default=0, ge=0, le=65535, description="Prometheus/health port; 0 picks a free one")
    metrics_host: str = Field(default="127.0.0.1", min_length=1, description="address the health/metrics server binds")
    stall_after_s: float = Field(
        default=30.0,
        gt=0.0,
        description="a service whose assigned partitions have lag and that folded nothing for this long fails "
        "/healthz and /readyz, seconds",
    )
    backend_wait_s: float = Field(
        default=60.0, ge=0.0, description="how long a service waits at start for Kafka and Redis to answer, seconds"
    )
    fleet_slot_s: float = Field(
        default=60.0, gt=0.0, description="event-time slot of fleet-scope policies (FleetOpt replans per slot), seconds"
    )
    checkpoint_interval_s: float = Field(
        default=CHECKPOINT_INTERVAL_S,
        ge=0.0,
        description="how often the stream processor and the policy service write their committed state to "
        "gov.checkpoints, what a rebuild resumes from once the log has expired; 0: never, seconds",
    )
    fleet_silence_wait_s: float = Field(
        default=FLEET_SILENCE_WAIT_S,
        gt=0.0,
        description="how long the policy service waits on an engine that trails the fleet by more than its silent "
        "slots (a dead or slow stream processor, or a stopped engine) before declaring it silent, seconds",
    )
    kafka_max_poll_interval_ms: int = Field(
        default=LOCAL_BROKER_TIMEOUTS.max_poll_interval_ms,
        ge=1000,
        description="rebalance timeout of the services' group members, ms (Apache Kafka: 300000)",
    )
    kafka_session_timeout_ms: int = Field(
        default=LOCAL_BROKER_TIMEOUTS.session_timeout_ms,
        ge=KAFKA_MIN_SESSION_TIMEOUT_MS,
        le=KAFKA_MAX_SESSION_TIMEOUT_MS,
        description="group session timeout of the services' consumers, ms (Apache Kafka: 45000); Apache Kafka "
        "refuses a member outside its group.min/max.session.timeout.ms (6000 and 1800000 by default)",
    )
    kafka_heartbeat_interval_ms: int = Field(
        default=LOCAL_BROKER_TIMEOUTS.heartbeat_interval_ms,
        ge=100,
        description="heartbeat interval of the services' consumers, ms (Apache Kafka: 3000)",
    )
    kafka_fetch_max_wait_ms: int = Field(
        default=LOCAL_BROKER_TIMEOUTS.fetch_max_wait_ms,
        ge=0,
        description="longest a broker may hold the services' fetches, ms (Apache Kafka: 500)",
    )
    kafka_linger_ms: int = Field(
        default=LOCAL_BROKER_TIMEOUTS.linger_ms, ge=0, description="producer batching delay, ms (Apache Kafka: 5)"
    )
    kafka_idempotent_producer: bool = Field(
        default=LOCAL_BROKER_TIMEOUTS.idempotent_producer,
        description="idempotent producer for decisions, estimates and snapshots (Apache Kafka: true; Tansu "
        "forgets producer ids when it restarts without its log); unset, true where `broker` is kafka",
    )
    dedup_window_events: int = Field(
        default=1024,
        ge=1,
        le=1_000_000,
        description="how many of each engine's latest event ids the stream processor remembers to skip duplicates",
    )
    max_event_ahead_s: float = Field(
        default=300.0,
        gt=0.0,
        description="an event further ahead of its engine's event-time watermark is dead-lettered, seconds",
    )
    max_event_behind_s: float = Field(
        default=300.0,
        gt=0.0,
        description="an event further behind its engine's event-time watermark is dead-lettered, seconds",
    )
    event_time_reanchor_events: int = Field(
        default=16,
        ge=1,
        le=100_000,
        description="out-of-bounds events of an engine in a row after which its watermark follows them",
    )
    registration_grace_s: float = Field(
        default=REGISTRATION_GRACE_S,
        ge=0.0,
        description="event time an engine that never registered waits before it counts for the control plane, s",
    )
    engine_retention_s: float = Field(
        default=ENGINE_RETENTION_S,
        gt=0.0,
        description="how long an engine's estimates outlive its last event (state in memory, keys in Redis), s",
    )
    stream_commit_interval_s: float = Field(
        default=STREAM_COMMIT_INTERVAL_S,
        gt=0.0,
        le=3600.0,
        description="the stream processor's longest wait between commits of its engines' states and offsets, s",
    )
    stream_runtime: Literal["kafka", "faust"] = Field(
        default="kafka",
        description="stream processor runtime: kafka (kafka-python) or faust (faust-streaming)",
    )
    gateway_host: str = Field(default="127.0.0.1", min_length=1, description="address governor gateway listens on")
    gateway_port: int = Field(default=8000, ge=0, le=65535, description="port of governor gateway; 0 picks a free one")
    gateway_id: str = Field(
        default="gateway-0",
        min_length=1,
        max_length=128,
        pattern=IDENTIFIER_PATTERN,
        description="the gateway's engine id on gov.telemetry (its routing events and acks)",
    )
    gateway_config: Path | None = Field(
        default=None, description="gateway file (TOML): static upstreams, pools, queue and routing options"
    )
    gateway_max_body_bytes: int = Field(
        default=4 * 1024 * 1024, ge=1024, le=1 << 30, description="largest request body the gateway accepts, bytes"
    )
    gateway_upstream_timeout_s: float = Field(
        default=600.0, gt=0.0, le=86_400.0, description="longest a request may take upstream, seconds"
    )
    gateway_health_interval_s: float = Field(
        default=2.0, gt=0.0, le=3600.0, description="how often the gateway checks each upstream's /health, seconds"
    )
    gateway_admin_token: SecretStr | None = Field(
        default=None,
        min_length=16,
        description="bearer token of the gateway's /admin API; required when gateway_host is not loopback; a secret",
    )

    @field_validator("gateway_admin_token", mode="before")
    @classmethod
    def _empty_token_is_unset(cls, value: object) -> object:
        """An empty token is no token, as for the other secrets."""
        return None if value == "" else value

    @model_validator(mode="after")
    def _heartbeat_within_session(self) -> Self:
        if self.kafka_heartbeat_interval_ms >= self.kafka_session_timeout_ms:
            msg = (
                f"kafka_heartbeat_interval_ms ({self.kafka_heartbeat_interval_ms}) must be below "
                f"kafka_session_timeout_ms ({self.kafka_session_timeout_ms})"
            )
            raise ValueError(msg)
        return self

    def engine_lifecycle(self) -> EngineLifecycle:
        """When an engine starts to count and when its estimates are forgotten, for the stream processor."""
        return EngineLifecycle(registration_grace_s=self.registration_grace_s, retention_s=self.engine_retention_s)

    def kafka_client_timeouts(self) -> KafkaClientTimeouts:
        """The Kafka client timeouts these settings name, for services/kafka_clients.py.

        The producer is idempotent where these settings say so, and otherwise where the local broker
        is Apache Kafka (``broker``): without idempotence a batch retried after a leader change (the
        broker paused past its session) landed after the next one and reordered the decision log.
        """
        idempotent = (
            self.kafka_idempotent_producer
            if "kafka_idempotent_producer" in self.model_fields_set
            else self.broker == "kafka"
        )
        return KafkaClientTimeouts(
            max_poll_interval_ms=self.kafka_max_poll_interval_ms,
            session_timeout_ms=self.kafka_session_timeout_ms,
            heartbeat_interval_ms=self.kafka_heartbeat_interval_ms,
            fetch_max_wait_ms=self.kafka_fetch_max_wait_ms,
            linger_ms=self.kafka_linger_ms,
            idempotent_producer=idempotent,
        )

    def redacted(self) -> dict[str, object]:
        """Return the settings for the ``settings_loaded`` log line, with credentials in URLs hidden."""
        shown = self.model_dump(mode="json")
        shown["redis_url"] = _redact_url(self.redis_url)
        return shown


def _redact_url(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if "@" not in rest:
        return url
    return f"{scheme}{sep}***@{rest.split('@', 1)[1]}"


class EngineSettings(SecuritySettings):
    """What an engine adapter (services/engines) needs to join a deployment: where, and who it is.

    The engine side reads these from the environment of the engine's process (``GOVERNOR_ENGINE_ID``
    and the others), so installing the adapter and exporting them is all an operator does.
    """

    deployment: str = Field(
        default="local", min_length=1, max_length=128, pattern=IDENTIFIER_PATTERN, description="deployment name"
    )
    kafka_bootstrap: str = Field(default="127.0.0.1:19092", description="Kafka bootstrap servers, host:port[,...]")
    redis_url: str = Field(default="redis://127.0.0.1:6379/0", description="Redis URL (env REDIS_URL)")
    engine_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=128,
        pattern=IDENTIFIER_PATTERN,
        description="this engine's id; the stat-logger plugin stays off while it is unset",
    )
    gpu: str = Field(default="unknown", min_length=1, max_length=128, description="GPU model, for the registration")
    hardware_profile: str | None = Field(default=None, description="EB+ calibration profile id (policies/ebplus)")
    pool: str = Field(default="default", min_length=1, max_length=128, description="fleet pool of the engine")
    tier: str = Field(default="default", min_length=1, max_length=128, description="tier of requests that name none")
    tbt_slo_s: float | None = Field(default=None, gt=0.0, le=60.0, description="TBT SLO of requests that name none")
    policy_poll_s: float = Field(default=1.0, gt=0.0, le=60.0, description="how often policies are re-read, seconds")
    heartbeat_s: float = Field(default=5.0, gt=0.0, le=600.0, description="heartbeat period of an engine, seconds")


def default_environment(name: str, value: str) -> None:
    """Set ``name`` for this process and its children unless the operator set it (a library's own switch)."""
    os.environ.setdefault(name, value)


def child_environment(overrides: Mapping[str, str]) -> dict[str, str]:
    """The environment a child process (a vLLM server the tooling starts) gets: this process's, with ``overrides``."""
    return {**os.environ, **overrides}
