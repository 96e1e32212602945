"""``RedisStore``: the production ``Store``, with Lua scripts for the two atomic operations.

Every Redis error is translated at this boundary into ``BackendUnavailableError`` (STYLE section 5).
Every Redis client of Governor (services, CLI, engine SDK) is built by ``redis_client`` here, which
applies the deployment's credentials (AUTH or an ACL user) and TLS files (``rediss://`` URLs).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from importlib import resources

import redis

from schemas.errors import BackendUnavailableError, ConfigError, UnreadableValueError
from schemas.names import (
    ack_key,
    estimate_pattern,
    estimate_scope_of,
    legacy_state_key,
    log_ids_key,
    offsets_key,
    policy_channel,
    policy_history_key,
    policy_key,
    policy_of_key,
    policy_pattern,
    state_key,
)
from schemas.policy_docs.base import MAX_VERSION
from services.settings import RedisSecurity
from services.store.policy_versions import HISTORY_CAP, check_version

VERSION_BOUND = MAX_VERSION + 1  # put_policy.lua's exclusive bound, 2**53


def redis_client(url: str, timeout_s: float, security: RedisSecurity | None = None) -> redis.Redis:
    """A client of ``url`` with ``timeout_s`` on every call, authenticated and over TLS as ``security`` says.

    Credentials written in the URL (``redis://user:password@host``) win over those of ``security``.
    TLS is the ``rediss://`` scheme; the server's certificate is always verified (against
    ``tls_ca_file`` or the system's CAs), host name included.

    Raises:
        ConfigError: TLS files are set for a ``redis://`` URL, or a TLS file does not exist.
    """
    security = security if security is not None else RedisSecurity()
    options: dict[str, object] = {"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s}
    if security.username is not None:
        options["username"] = security.username
    if security.password is not None:
        options["password"] = security.password.get_secret_value()
    files = (
        ("ssl_ca_certs", security.tls_ca_file),
        ("ssl_certfile", security.tls_cert_file),
        ("ssl_keyfile", security.tls_key_file),
    )
    named = {name: path for name, path in files if path is not None}
    if named and not url.startswith("rediss://"):
        msg = "Redis TLS files are set but REDIS_URL is not a rediss:// URL"
        raise ConfigError(msg)
    for path in named.values():
        if not path.is_file():
            msg = f"Redis TLS file {path} does not exist"
            raise ConfigError(msg)
    if url.startswith("rediss://"):
        options.update({name: str(path) for name, path in named.items()})
        options["ssl_cert_reqs"] = "required"
        options["ssl_check_hostname"] = True
    return redis.Redis.from_url(url, **options)


def _script(name: str) -> str:
    return resources.files("services.store").joinpath("lua", name).read_text()


class RedisStore:
    """A ``Store`` on one Redis deployment namespace ``gov:{deployment}:``."""

    def __init__(self, client: redis.Redis, deployment: str, history_cap: int = HISTORY_CAP) -> None:
        self._client = client
        self._deployment = deployment
        self._history_cap = history_cap
        self._commit = client.register_script(_script("commit.lua"))
        self._put_policy = client.register_script(_script("put_policy.lua"))

    @classmethod
    def from_url(cls, url: str, deployment: str, timeout_s: float, security: RedisSecurity | None = None) -> RedisStore:
        """Connect to ``url`` with ``timeout_s`` on every call (see ``redis_client``)."""
        return cls(redis_client(url, timeout_s, security), deployment)

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()

    def _call(self, what: str, fn: object, *args: object, **kwargs: object) -> object:
        try:
            return fn(*args, **kwargs)  # type: ignore[operator]
        except redis.RedisError as exc:
            msg = f"redis {what} failed: {exc}"
            raise BackendUnavailableError(msg, backend="redis") from exc

    def _read_policy_key(self, what: str, fn: object, key: str, *args: object) -> object:
        """``_call`` for a policy read, where a key of another type is a bad value, not an outage.

        Only policy keys and histories are replaced by the next write (``put_policy.lua``). The
        services' own keys (offsets, log ids, states) keep failing as outages: overwriting them
        would lose the offsets that make each effect exactly-once, so a wrong type there waits for
        an operator, and health turns red after ``GOVERNOR_STALL_AFTER_S``.

        Raises:
            UnreadableValueError: ``key`` holds another Redis type (``WRONGTYPE``).
        """
        try:
            return fn(key, *args)  # type: ignore[operator]
        except redis.ResponseError as exc:
            if not str(exc).startswith("WRONGTYPE"):
                msg = f"redis {what} failed: {exc}"
                raise BackendUnavailableError(msg, backend="redis") from exc
            msg = f"redis {what} of {key}: the key holds a value of another type ({exc})"
            raise UnreadableValueError(msg, key=key) from exc
        except redis.RedisError as exc:
            msg = f"redis {what} failed: {exc}"
            raise BackendUnavailableError(msg, backend="redis") from exc

    def applied_offsets(self, consumer: str) -> dict[str, int]:
        """Return ``"topic:partition" -> offset`` from ``gov:{dep}:offsets:{consumer}``."""
        raw = self._call("HGETALL", self._client.hgetall, offsets_key(self._deployment, consumer))
        assert isinstance(raw, dict)
        return {k.decode(): int(v) for k, v in raw.items()}

    def load_states(self, consumer: str, scopes: list[str]) -> dict[str, str]:
        """Return the state JSON of each of ``consumer``'s scopes that has one (``schemas.names.state_key``)."""
        if not scopes:
            return {}
        keys = [state_key(self._deployment, consumer, scope) for scope in scopes]
        values = self._call("MGET", self._client.mget, keys)
        assert isinstance(values, list)
        return {scope: value.decode() for scope, value in zip(scopes, values, strict=True) if value is not None}

    def load_legacy_states(self, scopes: list[str]) -> dict[str, str]:
        """Return the state JSON of each of ``scopes`` found under its old key (``legacy_state_key``)."""
        if not scopes:
            return {}
        keys = [legacy_state_key(self._deployment, scope) for scope in scopes]
        values = self._call("MGET", self._client.mget, keys)
        assert isinstance(values, list)
        return {scope: value.decode() for scope, value in zip(scopes, values, strict=True) if value is not None}

    def commit(
        self,
        consumer: str,
        offsets: Mapping[str, int],
        states: Mapping[str, str],
        summaries: Mapping[str, str],
        expire_s: Mapping[str, int] | None = None,
    ) -> bool:
        """Write states, summaries and offsets in one Lua call, refused when an offset is not newer."""
        expiries = expire_s or {}
        keys = [offsets_key(self._deployment, consumer)]
        values: list[str] = []
        ttls: list[int] = []
        for scope, state in states.items():
            keys.append(state_key(self._deployment, consumer, scope))
            values.append(state)
            ttls.append(expiries.get(scope, 0))
        for key, summary in summaries.items():
            keys.append(key)
            values.append(summary)
            ttls.append(expiries.get(key, 0))
        args: list[object] = [len(offsets)]
        for field, offset in offsets.items():
            args.extend([field, offset])
        args.extend(values)
        args.extend(ttls)
        result = self._call("commit", self._commit, keys=keys, args=args)
        return bool(result)

    def log_ids(self, consumer: str) -> dict[str, str]:
        """Return ``"topic:partition" -> topic id`` from ``gov:{dep}:log-ids:{consumer}``."""
        raw = self._call("HGETALL", self._client.hgetall, log_ids_key(self._deployment, consumer))
        assert isinstance(raw, dict)
        return {k.decode(): v.decode() for k, v in raw.items()}

    def record_log_ids(self, consumer: str, log_ids: Mapping[str, str]) -> None:
        """Record topic ids of partitions' logs."""
        if log_ids:
            self._call("HSET", self._client.hset, log_ids_key(self._deployment, consumer), mapping=dict(log_ids))

    def reset_partition(
        self, consumer: str, partition: str, topic_id: str | None, states: Mapping[str, str], dropped: list[str]
    ) -> None:
        """Forget the partition's applied offset, record its topic id, write and drop states, in one MULTI/EXEC."""
        pipe = self._client.pipeline(transaction=True)
        pipe.hdel(offsets_key(self._deployment, consumer), partition)
        if topic_id is not None:
            pipe.hset(log_ids_key(self._deployment, consumer), partition, topic_id)
        for scope, state in states.items():
            pipe.set(state_key(self._deployment, consumer, scope), state)
        for scope in dropped:
            pipe.delete(state_key(self._deployment, consumer, scope))
        self._call("MULTI/EXEC", pipe.execute)

    def estimate_scopes(self, name: str) -> list[str]:
        """Return the engine scopes with an estimate ``name`` (a SCAN of ``gov:{dep}:est:*:{name}``).

        A key the pattern matches that ``estimate_key`` cannot have built (a scope with ``:``, written
        before identifiers refused it) names no engine and is left out.
        """
        pattern = estimate_pattern(self._deployment, name)
        keys = self._call("SCAN", lambda: list(self._client.scan_iter(match=pattern, count=1000)))
        assert isinstance(keys, list)
        scopes = (estimate_scope_of(self._deployment, name, key.decode(errors="replace")) for key in keys)
        return sorted(scope for scope in scopes if scope is not None)

    def load_values(self, keys: list[str]) -> dict[str, str]:
        """Return the value of each of ``keys`` that has one (one MGET)."""
        if not keys:
            return {}
        values = self._call("MGET", self._client.mget, keys)
        assert isinstance(values, list)
        return {key: value.decode() for key, value in zip(keys, values, strict=True) if value is not None}

    def policy_documents(self) -> dict[tuple[str, str], str]:
        """Return every current document by (kind, scope): a SCAN of ``gov:{dep}:policy:*``, then one MGET.

        Keys ``policy_key`` cannot have built (not two identifiers after the namespace) are left out.
        """
        pattern = policy_pattern(self._deployment)
        keys = self._call("SCAN", lambda: sorted(self._client.scan_iter(match=pattern, count=1000)))
        assert isinstance(keys, list)
        named = {
            key: kind_scope
            for key in (raw.decode(errors="replace") for raw in keys)
            if (kind_scope := policy_of_key(self._deployment, key)) is not None
        }
        values = self.load_values(list(named))
        return {named[key]: value for key, value in values.items()}

    def get_policy(self, kind: str, scope: str) -> str | None:
        """Return the current document JSON of (kind, scope), or None.

        Bytes that are not UTF-8 are decoded with replacement characters: whoever wrote them, the
        value is then simply not a valid document (reported and overwritten), never an error here.

        Raises:
            UnreadableValueError: the key holds another Redis type (``put_policy`` replaces it).
        """
        value = self._read_policy_key("GET", self._client.get, policy_key(self._deployment, kind, scope))
        return value.decode(errors="replace") if isinstance(value, bytes) else None

    def put_policy(self, kind: str, scope: str, version: int, document_json: str) -> bool:
        """Compare-and-set the document; on success keep history and publish on the updates channel.

        Raises:
            InvalidInputError: ``version`` is out of bounds (``check_version``); nothing is sent to Redis.
        """
        check_version(version)
        announcement = json.dumps({"kind": kind, "scope": scope, "version": version})
        keys = [policy_key(self._deployment, kind, scope), policy_history_key(self._deployment, kind, scope)]
        channel = policy_channel(self._deployment)
        args = [version, document_json, self._history_cap, channel, announcement, VERSION_BOUND]
        return bool(self._call("put_policy", self._put_policy, keys=keys, args=args))

    def policy_history(self, kind: str, scope: str) -> list[str]:
        """Return the history list, newest first.

        Raises:
            UnreadableValueError: the key holds another Redis type (``put_policy`` replaces it).
        """
        raw = self._read_policy_key(
            "LRANGE", self._client.lrange, policy_history_key(self._deployment, kind, scope), 0, -1
        )
        assert isinstance(raw, list)
        return [item.decode(errors="replace") for item in raw]

    def get_ack(self, kind: str, engine_id: str) -> str | None:
        """Return an engine's last ``PolicyApplied`` ack of ``kind`` (JSON), or None."""
        value = self._call("GET", self._client.get, ack_key(self._deployment, kind, engine_id))
        return value.decode() if isinstance(value, bytes) else None

    def flush_deployment(self) -> int:
        """Delete every key of this deployment (rebuild from the log); return how many were removed."""
        removed = 0
        for key in self._client.scan_iter(match=f"gov:{self._deployment}:*", count=1000):
            removed += int(self._call("DEL", self._client.delete, key))  # type: ignore[call-overload]
        return removed
