"""Operator pins: a document an operator sets by hand, that engines obey and the policy service leaves alone.

A pin is two things in Redis: the pinned document itself, written with the same compare-and-set as
every decision to the key engines read (version above the current one, the same document type and
validation, history and announcement), and a pin key ``gov:{deployment}:pin:{kind}:{scope}`` that
expires with the pin. While the pin key exists the policy service records its own decisions but
does not write them (services/policy/decisions.py); when it expires or ``unpin`` deletes it, the
service's next decision (version above the pin's) takes the key back. The pin and the unpin are
recorded on ``gov.policy.decisions`` (``origin`` ``pin`` / ``unpin``) by the command that made them.

The pinned document is the current one with the operator's payload keys set: its ``computed_at``
is the engine's latest event time (from its estimate summary, else the current document's), and
its ``valid_until`` that plus the pin's duration, so an engine falls back to its safe defaults if
nothing replaces the pin.
"""

from __future__ import annotations

import json
import math
from typing import Any, Protocol

import redis
from pydantic import JsonValue, ValidationError

from schemas.errors import BackendUnavailableError, InvalidInputError
from schemas.estimates import EngineSummary
from schemas.names import estimate_key, pin_key
from schemas.policy_docs.base import PolicyDocument
from services.settings import RedisSecurity
from services.store.redis_store import redis_client

SUMMARY_NAME = "summary"


class PinBoard(Protocol):
    """Whether an operator's pin holds a (kind, scope)."""

    def holds(self, kind: str, scope: str) -> bool:
        """True while a pin on (kind, scope) has not expired or been removed."""
        ...


def parse_assignment(text: str) -> tuple[str, JsonValue]:
    """Split ``key=value``: the value is read as JSON (``0.5``, ``true``, ``"EB"``), else kept as text.

    Raises:
        InvalidInputError: no ``=`` or an empty key.
    """
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        msg = f"--set {text!r}: expected key=value (a dotted payload key, e.g. theta=0.5 or kv_gate.s_kv=0.3)"
        raise InvalidInputError(msg, field="set", value=text)
    try:
        value: JsonValue = json.loads(raw)
    except ValueError:
        value = raw
    return key.strip(), value


def _set_path(payload: dict[str, Any], key: str, value: JsonValue, kind: str) -> None:
    """Set dotted ``key`` in ``payload``, refusing keys the document's payload does not have."""
    parts = key.split(".")
    node: Any = payload
    for depth, part in enumerate(parts):
        if not isinstance(node, dict) or part not in node:
            known = sorted(node) if isinstance(node, dict) else []
            where = ".".join(parts[:depth]) or "payload"
            msg = f"{kind} {where} has no key {part!r} (keys: {', '.join(known)})"
            raise InvalidInputError(msg, field=key, value=value)
        if depth == len(parts) - 1:
            node[part] = value
        else:
            node = node[part]


def pinned_document(
    current: PolicyDocument,
    document_type: type[PolicyDocument],
    values: dict[str, JsonValue],
    *,
    event_time_s: float,
    for_s: float,
) -> PolicyDocument:
    """The document a pin writes: ``current`` with ``values`` set in its payload, one version above.

    Raises:
        InvalidInputError: a key the payload lacks, or a value the document type refuses.
    """
    if not (math.isfinite(for_s) and for_s > 0.0):
        msg = f"--for must be a positive duration, got {for_s}"
        raise InvalidInputError(msg, field="for", value=for_s)
    body = json.loads(current.model_dump_json())
    for key, value in values.items():
        _set_path(body["payload"], key, value, current.kind)
    computed_at = max(event_time_s, current.computed_at)
    body.update(
        version=current.version + 1,
        previous_version=current.version,
        computed_at=computed_at,
        valid_until=computed_at + for_s,
        diagnostics={**body["diagnostics"], "pinned": True},
        signature=None,
    )
    try:
        return document_type.model_validate_json(json.dumps(body))
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"])
        msg = f"pinned {current.kind} document is invalid: {where}: {first['msg']}"
        raise InvalidInputError(msg, field=where) from None


class RedisPins:
    """Pins of one deployment in Redis (the ``PinBoard`` the policy service reads)."""

    def __init__(self, client: redis.Redis, deployment: str) -> None:
        self._client = client
        self._deployment = deployment

    @classmethod
    def from_url(cls, url: str, deployment: str, timeout_s: float, security: RedisSecurity | None = None) -> RedisPins:
        """Connect to ``url`` with ``timeout_s`` on every call (see ``redis_client``)."""
        return cls(redis_client(url, timeout_s, security), deployment)

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()

    def holds(self, kind: str, scope: str) -> bool:
        """True while the pin key exists (Redis expires it with the pin)."""
        try:
            return bool(self._client.exists(pin_key(self._deployment, kind, scope)))
        except redis.RedisError as exc:
            msg = f"redis EXISTS failed: {exc}"
            raise BackendUnavailableError(msg, backend="redis") from exc

    def get(self, kind: str, scope: str) -> dict[str, Any] | None:
        """The pin's record (what it set, its version, when it expires), or None."""
        try:
            raw = self._client.get(pin_key(self._deployment, kind, scope))
        except redis.RedisError as exc:
            msg = f"redis GET failed: {exc}"
            raise BackendUnavailableError(msg, backend="redis") from exc
        return json.loads(raw) if isinstance(raw, bytes) else None

    def hold(self, kind: str, scope: str, record: dict[str, Any], for_s: float) -> None:
        """Set the pin key, expiring after ``for_s`` wall-clock seconds."""
        try:
            self._client.set(pin_key(self._deployment, kind, scope), json.dumps(record), px=max(1, int(for_s * 1000)))
        except redis.RedisError as exc:
            msg = f"redis SET failed: {exc}"
            raise BackendUnavailableError(msg, backend="redis") from exc

    def release(self, kind: str, scope: str) -> dict[str, Any] | None:
        """Delete the pin key; return the pin's record, or None when no pin held."""
        try:
            raw = self._client.getdel(pin_key(self._deployment, kind, scope))
        except redis.RedisError as exc:
            msg = f"redis GETDEL failed: {exc}"
            raise BackendUnavailableError(msg, backend="redis") from exc
        return json.loads(raw) if isinstance(raw, bytes) else None

    def engine_event_time(self, scope: str) -> float | None:
        """The engine's latest event time from its estimate summary, or None (a fleet scope, no summary)."""
        try:
            raw = self._client.get(estimate_key(self._deployment, scope, SUMMARY_NAME))
        except redis.RedisError as exc:
            msg = f"redis GET failed: {exc}"
            raise BackendUnavailableError(msg, backend="redis") from exc
        if not isinstance(raw, bytes):
            return None
        try:
            return EngineSummary.model_validate_json(raw).ts_s
        except ValidationError:
            return None
