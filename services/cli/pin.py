"""``governor pin KIND SCOPE --set key=value ... --for DURATION`` and ``governor unpin KIND SCOPE``.

A pin overrides payload keys of the current document of (KIND, SCOPE) for DURATION: it writes the
pinned document (version above the current one) to the key engines read and holds the key against
the policy service until it expires or is removed (services/policy/pins.py). Both commands record
what they did on ``gov.policy.decisions``.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from datetime import UTC, datetime

from kafka.errors import KafkaError
from pydantic import JsonValue, ValidationError

from decide.specs import default_registry
from schemas.errors import BackendUnavailableError, InvalidInputError
from schemas.names import DECISIONS_TOPIC
from schemas.policy_docs.base import PolicyDocument
from schemas.records import DecisionRecord, PinDetails
from schemas.signing import PolicyKeyring, sign, signature_problem
from services.cli.options import add_settings_flags, settings_from_args
from services.kafka_clients import close_producer, record_producer
from services.policy.pins import RedisPins, parse_assignment, pinned_document
from services.settings import Settings
from services.store.redis_store import RedisStore

FLAGS = ["deployment", "kafka_bootstrap", "redis_url", "log_format"]
DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h|d)?$")
UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``pin`` and ``unpin`` commands."""
    pin = commands.add_parser(
        "pin", help="override payload keys of a policy document for a while; the policy service leaves it alone"
    )
    pin.add_argument("kind", metavar="KIND", help="policy kind: admission, ebplus, slai, bfio or fleetopt")
    pin.add_argument("scope", metavar="SCOPE", help="engine id (or 'fleet' for fleetopt)")
    pin.add_argument(
        "--set",
        dest="values",
        action="append",
        required=True,
        metavar="KEY=VALUE",
        help="payload key to set (dotted for nested keys; the value is read as JSON, else as text); repeatable",
    )
    pin.add_argument("--for", dest="duration", required=True, metavar="DURATION", help="how long: 90s, 10m, 2h, 1d")
    add_settings_flags(pin, FLAGS)
    pin.set_defaults(handler=run_pin)
    unpin = commands.add_parser("unpin", help="remove a pin; the policy service's next decision takes the key back")
    unpin.add_argument("kind", metavar="KIND", help="policy kind")
    unpin.add_argument("scope", metavar="SCOPE", help="engine id (or 'fleet')")
    add_settings_flags(unpin, FLAGS)
    unpin.set_defaults(handler=run_unpin)


def parse_duration(text: str) -> float:
    """Seconds of ``90``, ``90s``, ``10m``, ``2h`` or ``1d``.

    Raises:
        InvalidInputError: anything else, or zero.
    """
    match = DURATION.match(text.strip())
    seconds = float(match.group(1)) * UNIT_S[match.group(2) or "s"] if match else 0.0
    if seconds <= 0.0:
        msg = f"--for {text!r}: expected a positive duration such as 90s, 10m, 2h or 1d"
        raise InvalidInputError(msg, field="for", value=text)
    return seconds


def _document_type(kind: str) -> type[PolicyDocument]:
    registry = default_registry()
    if kind not in registry.kinds():
        msg = f"unknown policy kind {kind!r} (expected one of: {', '.join(registry.kinds())})"
        raise InvalidInputError(msg, field="kind", value=kind)
    return registry.get(kind).document_type


def _current(
    store: RedisStore,
    document_type: type[PolicyDocument],
    kind: str,
    scope: str,
    deployment: str,
    *,
    keyring: PolicyKeyring | None,
) -> PolicyDocument:
    raw = store.get_policy(kind, scope)
    if raw is None:
        msg = f"no {kind} document for {scope!r} in deployment {deployment!r} yet: nothing to pin"
        raise InvalidInputError(msg, field="scope", value=scope)
    try:
        document = document_type.model_validate_json(raw)
    except ValidationError as exc:
        msg = f"the stored {kind} document for {scope!r} is invalid: {exc.errors(include_url=False)[0]['msg']}"
        raise InvalidInputError(msg, field="scope", value=scope) from None
    problem = None if keyring is None else signature_problem(document, keyring)
    if problem is not None:
        msg = f"the stored {kind} document for {scope!r} is not validly signed ({problem}): not building on it"
        raise InvalidInputError(msg, field="scope", value=scope)
    return document


def _signed(document: PolicyDocument, keyring: PolicyKeyring | None) -> PolicyDocument:
    """``document`` signed with the deployment's key, so engines obey the pin (docs/security.md)."""
    return document if keyring is None else sign(document, keyring.signing)


def _record(settings: Settings, record: DecisionRecord) -> None:
    """Append ``record`` to ``gov.policy.decisions`` and wait for the broker."""
    try:
        producer = record_producer(settings.kafka_bootstrap, security=settings.kafka_security())
    except KafkaError as exc:
        msg = f"kafka at {settings.kafka_bootstrap} did not answer: {exc}"
        raise BackendUnavailableError(msg, backend="kafka") from exc
    try:
        future = producer.send(
            DECISIONS_TOPIC, key=f"{record.kind}:{record.scope}".encode(), value=record.model_dump_json().encode()
        )
        producer.flush(timeout=settings.kafka_timeout_s)
        if not future.succeeded():
            msg = f"kafka at {settings.kafka_bootstrap} did not take the {record.origin} record"
            raise BackendUnavailableError(msg, backend="kafka")
    finally:
        close_producer(producer, timeout_s=5.0)


def _utc(unix_s: float) -> str:
    return datetime.fromtimestamp(unix_s, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_pin(args: argparse.Namespace) -> int:
    """Pin: hold the key, write the pinned document above the current version, record it."""
    settings = settings_from_args(args)
    for_s = parse_duration(args.duration)
    values: dict[str, JsonValue] = dict(parse_assignment(text) for text in args.values)
    document_type = _document_type(args.kind)
    keyring = settings.policy_keyring()
    store = RedisStore.from_url(
        settings.redis_url, settings.deployment, settings.redis_timeout_s, settings.redis_security()
    )
    pins = RedisPins.from_url(
        settings.redis_url, settings.deployment, settings.redis_timeout_s, settings.redis_security()
    )
    try:
        current = _current(store, document_type, args.kind, args.scope, settings.deployment, keyring=keyring)
        event_time = pins.engine_event_time(args.scope) or current.computed_at
        pinned = _signed(pinned_document(current, document_type, values, event_time_s=event_time, for_s=for_s), keyring)
        expires = time.time() + for_s
        details = PinDetails(values=values, for_s=for_s, expires_at_unix_s=expires, replaced_version=current.version)
        pins.hold(args.kind, args.scope, json.loads(details.model_dump_json()) | {"version": pinned.version}, for_s)
        if not store.put_policy(args.kind, args.scope, pinned.version, pinned.model_dump_json()):
            current = _current(store, document_type, args.kind, args.scope, settings.deployment, keyring=keyring)
            pinned = _signed(
                pinned_document(current, document_type, values, event_time_s=event_time, for_s=for_s), keyring
            )
            details = details.model_copy(update={"replaced_version": current.version})
            pins.hold(args.kind, args.scope, json.loads(details.model_dump_json()) | {"version": pinned.version}, for_s)
            if not store.put_policy(args.kind, args.scope, pinned.version, pinned.model_dump_json()):
                pins.release(args.kind, args.scope)
                msg = f"{args.kind} {args.scope}: a newer version was written twice while pinning; try again"
                raise InvalidInputError(msg, field="scope", value=args.scope)
    finally:
        store.close()
        pins.close()
    _record(
        settings,
        DecisionRecord(
            deployment=settings.deployment,
            kind=args.kind,
            scope=args.scope,
            version=pinned.version,
            accepted=True,
            document=json.loads(pinned.model_dump_json()),
            origin="pin",
            pin=details,
        ),
    )
    shown = ", ".join(f"{key}={json.dumps(value)}" for key, value in values.items())
    print(
        f"pinned {args.kind} {args.scope} at version {pinned.version} (replacing {details.replaced_version}): {shown}; "
        f"holds for {for_s:g} s, until {_utc(expires)}; engines obey it until event time {pinned.valid_until:.1f} s"
    )
    return 0


def run_unpin(args: argparse.Namespace) -> int:
    """Unpin: delete the pin key and record it; exit 1 when no pin held."""
    settings = settings_from_args(args)
    document_type = _document_type(args.kind)
    store = RedisStore.from_url(
        settings.redis_url, settings.deployment, settings.redis_timeout_s, settings.redis_security()
    )
    pins = RedisPins.from_url(
        settings.redis_url, settings.deployment, settings.redis_timeout_s, settings.redis_security()
    )
    try:
        held = pins.release(args.kind, args.scope)
        current = (
            None
            if held is None
            else _current(store, document_type, args.kind, args.scope, settings.deployment, keyring=None)
        )
    finally:
        store.close()
        pins.close()
    if held is None or current is None:
        print(f"no pin on {args.kind} {args.scope} in deployment {settings.deployment} (expired or never set)")
        return 1
    version = int(held.pop("version"))
    _record(
        settings,
        DecisionRecord(
            deployment=settings.deployment,
            kind=args.kind,
            scope=args.scope,
            version=version,
            accepted=False,
            document=json.loads(current.model_dump_json()),
            origin="unpin",
            pin=PinDetails.model_validate_json(json.dumps(held)),
        ),
    )
    print(
        f"unpinned {args.kind} {args.scope} (pinned version {version}); engines keep it until the policy "
        f"service's next decision (version {current.version + 1}) replaces it"
    )
    return 0
