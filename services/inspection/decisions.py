"""Finding one decision on ``gov.policy.decisions``, and the estimate snapshot it read on ``gov.estimates``.

The data of ``governor explain``. Every decision the policy service makes is on the decisions
topic with its whole document: the inputs digest (snapshot id, estimate versions, Kafka offsets,
engines covered), the diagnostics and the clamps (DESIGN principle 6), so a decision is
explained from the log alone, after its Redis key has moved on.
"""

from __future__ import annotations

import json

from pydantic import ValidationError

from schemas.errors import InvalidInputError
from schemas.names import DECISIONS_TOPIC, ESTIMATES_TOPIC
from schemas.records import DecisionRecord, EstimateSnapshot
from services.kafka_security import PLAINTEXT
from services.replay.replay import read_topic
from services.settings import KafkaSecurity


def read_decisions(bootstrap: str, deployment: str, security: KafkaSecurity = PLAINTEXT) -> list[DecisionRecord]:
    """Every decision record of ``deployment`` on ``gov.policy.decisions``, in log order.

    Raises:
        BackendUnavailableError: the broker did not answer.
        InvalidInputError: the topic does not exist (no policy service ever ran there).
    """
    records: list[DecisionRecord] = []
    for raw in read_topic(bootstrap, DECISIONS_TOPIC, security=security):
        try:
            record = DecisionRecord.model_validate_json(raw)
        except ValidationError:
            continue
        if record.deployment == deployment:
            records.append(record)
    return records


def _describe(values: set[str] | set[int]) -> str:
    return ", ".join(str(v) for v in sorted(values)) or "none"


def find_decision(
    bootstrap: str,
    *,
    deployment: str,
    kind: str,
    scope: str,
    version: int | None,
    timeout_s: float,
    security: KafkaSecurity = PLAINTEXT,
) -> DecisionRecord:
    """Return the decision of (kind, scope) at ``version`` (default: the newest accepted one).

    An accepted record wins over a refused one of the same version. Shadow policies' records are
    left out: they are never what engines were told (``governor shadow report`` compares them).

    Raises:
        InvalidInputError: no such decision (the message lists what there is).
        BackendUnavailableError: the broker does not answer.
    """
    kinds: set[str] = set()
    scopes: set[str] = set()
    matches: dict[int, bytes] = {}
    accepted: set[int] = set()
    for raw in read_topic(bootstrap, DECISIONS_TOPIC, timeout_s=timeout_s, security=security):
        record = json.loads(raw)
        if record.get("deployment") != deployment or record.get("shadow") is not None:
            continue
        kinds.add(str(record.get("kind")))
        if record.get("kind") != kind:
            continue
        scopes.add(str(record.get("scope")))
        if record.get("scope") != scope:
            continue
        number = int(record["version"])
        if number not in accepted:
            matches[number] = raw
            if record.get("accepted"):
                accepted.add(number)
    if not kinds:
        msg = f"no decisions of deployment {deployment!r} on {DECISIONS_TOPIC}"
        raise InvalidInputError(msg, field="deployment", value=deployment)
    if not matches:
        if kind not in kinds:
            msg = f"no {kind} decisions in deployment {deployment!r} (kinds decided: {_describe(kinds)})"
            raise InvalidInputError(msg, field="kind", value=kind)
        msg = f"no {kind} decision for scope {scope!r} (scopes with {kind} decisions: {_describe(scopes)})"
        raise InvalidInputError(msg, field="scope", value=scope)
    chosen = version if version is not None else max(accepted or matches)
    if chosen not in matches:
        msg = f"no {kind} decision for {scope} at version {chosen} (versions: {_describe(set(matches))})"
        raise InvalidInputError(msg, field="version", value=chosen)
    return DecisionRecord.model_validate_json(matches[chosen])


def find_snapshot(
    bootstrap: str, snapshot_id: str, *, timeout_s: float, security: KafkaSecurity = PLAINTEXT
) -> EstimateSnapshot | None:
    """Return the estimate snapshot ``snapshot_id`` from ``gov.estimates``, or None when it is not there."""
    needle = snapshot_id.encode()
    for raw in read_topic(bootstrap, ESTIMATES_TOPIC, timeout_s=timeout_s, security=security):
        if needle in raw:
            snapshot = EstimateSnapshot.model_validate_json(raw)
            if snapshot.snapshot_id == snapshot_id:
                return snapshot
    return None
