"""``PolicyClient``: how an engine reads the policies it obeys, without ever waiting on Redis.

The client keeps the last valid document of every (kind, scope) it was asked for. A background
thread refreshes them: it listens on the deployment's pub/sub channel and, because Redis pub/sub
does not survive reconnects, also polls every ``poll_interval_s``. A fetched document is accepted
only when it validates against its schema (types and physical bounds) and its version is above the
cached one. Where the deployment has a signing key (``keyring``), a document must also carry a
valid signature of the policy service (schemas/signing.py) and name the kind, scope and deployment
it was read for; any other document (written to Redis by anyone without the key, or copied from
another key) is rejected, counted and logged once, and the client keeps serving what it had.
Without a keyring, documents are not authenticated (docs/security.md). A value that is not a valid
document (not JSON, wrong shape, out of bounds) is ignored the same way: counted, reported once per
key until a valid one replaces it, and the cache keeps serving. ``current`` answers from
the cache alone: the last valid document until its ``valid_until``, and None after it, when the
engine applies the policy's documented safe defaults.
Redis outages are logged and counted, never raised into the engine's loop.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import dataclass

import redis
import structlog
from pydantic import ValidationError

from schemas.engines import PolicyApplied
from schemas.errors import InvalidInputError
from schemas.names import policy_channel, policy_key
from schemas.policy_docs import POLICY_DOCUMENTS
from schemas.policy_docs.base import PolicyDocument
from schemas.signing import PolicyKeyring, signature_problem
from services.sdk.protocol import TelemetrySink
from services.settings import RedisSecurity
from services.store.redis_store import redis_client

log = structlog.get_logger(__name__)

DOCUMENT_TYPES: dict[str, type[PolicyDocument]] = {cls.model_fields["kind"].default: cls for cls in POLICY_DOCUMENTS}


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyClientStats:
    """Counters: refreshes, documents accepted, rejected (schema or version), unsigned or forged, Redis errors."""

    refreshes: int
    accepted: int
    rejected: int
    signature_rejected: int
    backend_errors: int


class PolicyClient:
    """Cached, validated, version-monotonic access to a deployment's policy documents."""

    def __init__(
        self,
        redis_url: str,
        deployment: str,
        *,
        poll_interval_s: float = 1.0,
        timeout_s: float = 0.5,
        start: bool = True,
        security: RedisSecurity | None = None,
        keyring: PolicyKeyring | None = None,
    ) -> None:
        """Connect (lazily: nothing waits on Redis here) and start the refresh threads unless ``start`` is False.

        Args:
            redis_url: the deployment's Redis.
            deployment: the deployment whose documents are read.
            poll_interval_s: how often every watched document is re-read.
            timeout_s: timeout of each Redis call.
            start: start the background threads now.
            security: Redis credentials and TLS files (``SecuritySettings.redis_security``).
            keyring: the policy signing keys (``SecuritySettings.policy_keyring``); None accepts unsigned documents.
        """
        self._deployment = deployment
        self._keyring = keyring
        self._client = redis_client(redis_url, timeout_s, security)
        self._poll_interval_s = poll_interval_s
        self._cache: dict[tuple[str, str], PolicyDocument] = {}
        self._watched: set[tuple[str, str]] = set()
        self._unwatchable: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._refreshes = 0
        self._accepted = 0
        self._rejected = 0
        self._signature_rejected = 0
        self._backend_errors = 0
        self._last_error_log_s = 0.0
        self._rejected_keys: set[tuple[str, str]] = set()
        self._threads: list[threading.Thread] = []
        if start:
            self.start()

    def start(self) -> None:
        """Start the polling and pub/sub threads."""
        for target, name in ((self._poll_loop, "governor-policy-poll"), (self._listen_loop, "governor-policy-sub")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def close(self) -> None:
        """Stop the background threads and close the connection pool."""
        self._stopped.set()
        self._wake.set()
        for thread in self._threads:
            thread.join(timeout=2.0)
        self._client.close()

    def watch(self, kind: str, scope: str) -> None:
        """Ask for (kind, scope) to be kept fresh; ``current`` calls this itself.

        A kind or scope that cannot be part of a key (``schemas.names.key_part``) has no document:
        it is reported once and never fetched, so ``current`` gives the safe defaults and nothing
        raises into the engine.
        """
        with self._lock:
            if (kind, scope) in self._watched or (kind, scope) in self._unwatchable:
                return
            try:
                policy_key(self._deployment, kind, scope)
            except InvalidInputError as exc:
                self._unwatchable.add((kind, scope))
                log.warning("policy_watch_refused", kind=kind, scope=scope, reason=str(exc))
                return
            self._watched.add((kind, scope))
        self._wake.set()

    def current(self, kind: str, scope: str, now_s: float) -> PolicyDocument | None:
        """Return the cached valid document of (kind, scope) at ``now_s``, or None (apply safe defaults).

        An engine calls this on every step, so it takes no lock once (kind, scope) is watched: the set of
        watched keys only grows, the refresh threads replace a cached document whole, and a read of
        either is atomic under the GIL, so the step never waits on a refresh holding the lock.
        """
        key = (kind, scope)
        if key not in self._watched:
            self.watch(kind, scope)
        document = self._cache.get(key)
        if document is None or now_s > document.valid_until:
            return None
        return document

    def stats(self) -> PolicyClientStats:
        """Return the counters."""
        with self._lock:
            return PolicyClientStats(
                refreshes=self._refreshes,
                accepted=self._accepted,
                rejected=self._rejected,
                signature_rejected=self._signature_rejected,
                backend_errors=self._backend_errors,
            )

    def refresh(self) -> None:
        """Fetch every watched document once (the poll step; also usable synchronously)."""
        with self._lock:
            watched = sorted(self._watched)
        if not watched:
            return
        keys = [policy_key(self._deployment, kind, scope) for kind, scope in watched]
        try:
            values = self._client.mget(keys)
        except redis.RedisError as exc:
            self._backend_error(exc)
            return
        with self._lock:
            self._refreshes += 1
        for (kind, scope), raw in zip(watched, values, strict=True):
            if raw is not None:
                self._offer(kind, scope, raw)

    def _offer(self, kind: str, scope: str, raw: bytes | str) -> None:
        document_type = DOCUMENT_TYPES.get(kind)
        try:
            if document_type is None:
                msg = f"unknown policy kind {kind!r}"
                raise ValueError(msg)
            document = document_type.model_validate_json(raw)
        except (ValidationError, ValueError) as exc:
            with self._lock:
                self._rejected += 1
                first = (kind, scope) not in self._rejected_keys
                self._rejected_keys.add((kind, scope))
            if first:
                log.warning("policy_rejected", kind=kind, scope=scope, reason=str(exc).splitlines()[0], serving="cache")
            return
        if self._keyring is not None and not self._authentic(kind, scope, document, self._keyring):
            return
        with self._lock:
            cached = self._cache.get((kind, scope))
            if cached is not None and document.version <= cached.version:
                if document.version < cached.version:
                    self._rejected += 1
                return
            self._cache[(kind, scope)] = document
            self._accepted += 1
            self._rejected_keys.discard((kind, scope))
        log.debug("policy_accepted", kind=kind, scope=scope, version=document.version)

    def _authentic(self, kind: str, scope: str, document: PolicyDocument, keyring: PolicyKeyring) -> bool:
        """Whether ``document`` is signed by a key of ``keyring`` for this deployment, kind and scope."""
        problem = signature_problem(document, keyring)
        if problem is None and (document.kind, document.scope, document.deployment) != (kind, scope, self._deployment):
            problem = "misplaced"
        if problem is None:
            return True
        with self._lock:
            self._signature_rejected += 1
            first = self._signature_rejected == 1
        if first:
            log.warning("policy_signature_rejected", kind=kind, scope=scope, reason=problem, serving="last valid")
        return False

    def _backend_error(self, exc: Exception) -> None:
        with self._lock:
            self._backend_errors += 1
            now = time.monotonic()
            warn = now - self._last_error_log_s >= 5.0
            if warn:
                self._last_error_log_s = now
        if warn:
            log.warning("redis_unavailable", error=str(exc), serving="cache")

    def _poll_loop(self) -> None:
        while not self._stopped.is_set():
            self.refresh()
            self._wake.wait(self._poll_interval_s)
            self._wake.clear()

    def _listen_loop(self) -> None:
        channel = policy_channel(self._deployment)
        while not self._stopped.is_set():
            pubsub = self._client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
            try:
                pubsub.subscribe(channel)
                while not self._stopped.is_set():
                    message = pubsub.get_message(timeout=0.2)
                    if message is not None and self._is_watched(message["data"]):
                        self._wake.set()
            except (redis.RedisError, OSError) as exc:
                self._backend_error(exc)
                self._stopped.wait(self._poll_interval_s)
            finally:
                with contextlib.suppress(redis.RedisError, OSError):
                    pubsub.close()

    def _is_watched(self, data: bytes) -> bool:
        try:
            announcement = json.loads(data)
            key = (str(announcement["kind"]), str(announcement["scope"]))
        except (ValueError, KeyError, TypeError):
            return False
        with self._lock:
            return key in self._watched


def acknowledge(
    sink: TelemetrySink, document: PolicyDocument, *, engine_id: str, seq: int, ts: float, event_id: str
) -> None:
    """Publish the engine's ``PolicyApplied`` ack of ``document`` through ``sink``."""
    sink.publish(
        PolicyApplied(
            event_id=event_id,
            ts=ts,
            deployment=document.deployment,
            engine_id=engine_id,
            seq=seq,
            kind=document.kind,
            scope=document.scope,
            version=document.version,
        )
    )
