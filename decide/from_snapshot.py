"""Turning one estimate snapshot into one versioned policy document (live and offline alike).

``decide_from_snapshot`` is the single code path both the live policy service and the offline
replay call (STYLE principle 2): read the previous document, build inputs, decide, and wrap the
decision in its document: version = previous + 1, ``computed_at`` = the snapshot's event time,
``valid_until`` = that plus the decision's validity, the inputs digest, the diagnostics, the
clamps and the previous version. A snapshot the policy has already decided from (a duplicate
after a processor restart) is skipped, so the decision stream is the same whatever the redeliveries.
A decision its spec calls ``unchanged`` (nothing new for the engine, SLAI's hysteresis) is skipped
too, until the previous document is half way to its ``valid_until``: then it is published again, so
a steady engine's document never lapses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from decide.registry import PolicySpec
from schemas.estimates import FleetSummary
from schemas.policy_docs.base import ClampRecord, InputsDigest, PolicyDocument
from schemas.records import EstimateSnapshot


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """What one snapshot produced for one policy: a document, or why there is none."""

    document: PolicyDocument | None
    skipped: str | None


def _already_decided(previous: PolicyDocument | None, snapshot: EstimateSnapshot) -> bool:
    if previous is None:
        return False
    return previous.inputs.estimate_versions.get(snapshot.scope, 0) >= snapshot.version


def decide_from_snapshot(
    spec: PolicySpec, snapshot: EstimateSnapshot, previous: PolicyDocument | None, *, floor_version: int = 0
) -> Outcome:
    """Decide ``spec`` from ``snapshot`` and the policy's previous document.

    ``floor_version`` is the version of a stored value the policy cannot build upon (unreadable, or
    not validly signed): the new document is numbered above it, so it replaces that value.
    """
    if _already_decided(previous, snapshot):
        return Outcome(document=None, skipped="duplicate_snapshot")
    inputs = spec.inputs_from_snapshot(snapshot)
    if inputs is None:
        return Outcome(document=None, skipped="not_enough_data")
    decision = spec.decide(inputs, previous, snapshot.ts)
    if previous is not None and spec.unchanged is not None and spec.unchanged(previous, decision):
        refresh_at = previous.computed_at + (previous.valid_until - previous.computed_at) / 2.0
        if snapshot.ts < refresh_at:
            return Outcome(document=None, skipped="unchanged")
    version = max(floor_version, 0 if previous is None else previous.version) + 1
    digest = InputsDigest(
        snapshot_id=snapshot.snapshot_id,
        estimate_versions={snapshot.scope: snapshot.version},
        offsets=list(snapshot.offsets),
        engines=[snapshot.scope] if spec.scope == "engine" else sorted(_engines_of(snapshot)),
    )
    clamps = [
        ClampRecord(name=c.name, decided=None if math.isnan(c.decided) else c.decided, pushed=c.pushed)
        for c in decision.clamps
    ]
    document = spec.document_type.model_validate(
        {
            "kind": spec.kind,
            "scope": snapshot.scope,
            "deployment": snapshot.deployment,
            "version": version,
            "computed_at": snapshot.ts,
            "valid_until": snapshot.ts + decision.valid_for_s,
            "inputs": digest,
            "diagnostics": {k: _finite(v) for k, v in decision.diagnostics.items()},
            "clamps": clamps,
            "previous_version": None if previous is None else previous.version,
            "payload": decision.payload,
            "state": decision.state,
        }
    )
    return Outcome(document=document, skipped=None)


def _finite(value: float | int | str | bool | None) -> float | int | str | bool | None:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _engines_of(snapshot: EstimateSnapshot) -> list[str]:
    return list(snapshot.estimates.engines) if isinstance(snapshot.estimates, FleetSummary) else []
