"""The few values of a policy document an operator watches: what ``governor status`` prints and Prometheus exports.

Each policy's payload holds tens of fields; ``watched_values`` picks the ones that say what an engine is
being told (EB+ mode and k/N, SLAI's offset rule, BF-IO's horizon, FleetOpt's pool sizes, the
admission level) as numbers, so the metrics and the status table read the same values, and
parses a stored or recorded document into its typed model on the way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import JsonValue, ValidationError

from schemas.errors import InvalidInputError
from schemas.policy_docs import (
    POLICY_DOCUMENTS,
    AdmissionPolicy,
    BfioPolicy,
    EbplusMode,
    EbplusPolicy,
    FleetoptPolicy,
    PolicyDocument,
    SlaiPolicy,
)

DOCUMENT_TYPES: dict[str, type[PolicyDocument]] = {cls.model_fields["kind"].default: cls for cls in POLICY_DOCUMENTS}
ADMISSION_LEVELS = {"ok": 0.0, "busy": 1.0, "overloaded": 2.0}


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchedValue:
    """One watched value: its metric name, the number exported, and how people read it."""

    name: str
    value: float
    shown: str


def parse_document(kind: str, raw: str | bytes | Mapping[str, JsonValue]) -> PolicyDocument:
    """Validate a document of ``kind`` (JSON text or a decoded record's dict) into its model.

    Raises:
        InvalidInputError: an unknown kind, or a document that fails its schema.
    """
    document_type = DOCUMENT_TYPES.get(kind)
    if document_type is None:
        msg = f"unknown policy kind {kind!r} (known: {', '.join(sorted(DOCUMENT_TYPES))})"
        raise InvalidInputError(msg, field="kind", value=kind)
    try:
        if isinstance(raw, str | bytes):
            return document_type.model_validate_json(raw)
        return document_type.model_validate(raw)
    except ValidationError as exc:
        msg = f"{kind} document does not validate: {exc.errors(include_url=False)[0]['msg']}"
        raise InvalidInputError(msg, field="document") from exc


def watched_values(document: PolicyDocument) -> list[WatchedValue]:
    """Return the watched values of ``document`` (none for a kind without watched values)."""
    if isinstance(document, EbplusPolicy):
        p = document.payload
        return [
            WatchedValue(
                name="ebplus_exclusive", value=1.0 if p.mode is EbplusMode.EB else 0.0, shown=f"mode {p.mode}"
            ),
            WatchedValue(name="ebplus_k", value=float(p.k), shown=f"k {p.k}"),
            WatchedValue(name="ebplus_n", value=float(p.n), shown=f"N {p.n}"),
        ]
    if isinstance(document, SlaiPolicy):
        s = document.payload
        values = [
            WatchedValue(name="slai_delta_lo", value=s.delta_lo, shown=f"delta {s.delta_lo:g}|{s.delta_hi:g}"),
            WatchedValue(name="slai_delta_hi", value=s.delta_hi, shown=f"at kv {s.kv_threshold_frac:.0%}"),
        ]
        if s.mode == "fixed":
            values = [
                WatchedValue(name="slai_delta_fixed", value=s.delta_fixed, shown=f"delta fixed {s.delta_fixed:g}")
            ]
        if s.delta_override is not None:
            values.append(
                WatchedValue(name="slai_delta_override", value=s.delta_override, shown=f"override {s.delta_override:g}")
            )
        return values
    if isinstance(document, FleetoptPolicy):
        f = document.payload
        return [
            WatchedValue(
                name="fleetopt_n_short_gpus", value=float(f.fleet.short.n_gpus), shown=f"n_s {f.fleet.short.n_gpus}"
            ),
            WatchedValue(
                name="fleetopt_n_long_gpus", value=float(f.fleet.long.n_gpus), shown=f"n_l {f.fleet.long.n_gpus}"
            ),
            WatchedValue(
                name="fleetopt_b_short_tokens",
                value=float(f.routing.b_short_tokens),
                shown=f"B {f.routing.b_short_tokens}",
            ),
        ]
    if isinstance(document, BfioPolicy):
        b = document.payload
        return [
            WatchedValue(name="bfio_horizon_steps", value=float(b.horizon_steps), shown=f"H {b.horizon_steps} {b.mode}")
        ]
    if isinstance(document, AdmissionPolicy):
        a = document.payload
        return [
            WatchedValue(name="admission_level", value=ADMISSION_LEVELS[a.level], shown=a.level),
            WatchedValue(
                name="admission_admit_fraction", value=a.admit_fraction, shown=f"admit {a.admit_fraction:.0%}"
            ),
        ]
    return []
