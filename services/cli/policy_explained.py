"""What ``governor explain KIND SCOPE --inputs --json`` prints, read back as ``governor policy KIND --input``.

Explain prints the decision record, the estimate snapshot it read and, where the decision built on an
earlier version, that version's record (``previous``). ``decide_explained`` decides again from them as
the policy service did: the policy's own ``inputs_from_snapshot`` and ``decide`` (its registry spec,
with the default params or those of ``--config FILE``), the previous document as the prior state
and the snapshot's event time as ``now_s``. With the config the decision was made with, the payload
is the one explain printed; where the file or the params cannot give that (no previous version, a
different config), a one-line note on stderr says so. A file that is not such an output, or is bad,
is one ``InvalidInputError`` line naming the file and the field, never the file's contents.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard, TypeVar

from pydantic import BaseModel, ValidationError

from decide.wiring.fleetopt import FLEET_SLOT_S
from policies.decision import Decision
from schemas.errors import InvalidInputError
from schemas.policy_docs.base import PolicyDocument
from schemas.records import DecisionRecord, EstimateSnapshot
from services.policy.config import PolicyConfig, config_policy_set, read_config

SHOWN_VALUE_CHARS = 80

ModelT = TypeVar("ModelT", bound=BaseModel)


@dataclass(frozen=True, slots=True, kw_only=True)
class ExplainedDecision:
    """A decision made again from an explain output.

    Attributes:
        scope: the decision's scope (an engine id, or the fleet).
        snapshot_id: the estimate snapshot it was decided from.
        inputs: the policy's inputs built from the snapshot (its wiring's type).
        decision: what the policy decided from them and the previous document.
        now_s: the snapshot's event time, seconds: the decision's ``computed_at``.
        config: the policy config whose params were used, or None for the defaults.
    """

    scope: str
    snapshot_id: str
    inputs: Any
    decision: Decision[Any, Any]
    now_s: float
    config: PolicyConfig | None


def add_config_flag(parser: argparse.ArgumentParser) -> None:
    """Add ``--config FILE``: the policy config whose params an explain output is decided again with."""
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE.toml",
        help="with an explain output: decide with this policy config's params (default: the paper's)",
    )


def is_explain_output(body: object) -> TypeGuard[dict[str, Any]]:
    """Whether a parsed JSON file is ``governor explain --json`` output (it holds the ``decision``)."""
    return isinstance(body, dict) and "decision" in body


def invalid_input(path: Path, exc: ValidationError, prefix: str = "") -> InvalidInputError:
    """One line naming the file, the first bad field and its value, shortened (never the whole file)."""
    first = exc.errors()[0]
    field = prefix + ".".join(str(part) for part in first["loc"])
    where = f"field {field.rstrip('.')}" if field else "document"
    shown = repr(first.get("input"))
    if len(shown) > SHOWN_VALUE_CHARS:
        shown = shown[: SHOWN_VALUE_CHARS - 3] + "..."
    msg = f"{path}: {where}: {first['msg']} (got {shown})"
    return InvalidInputError(msg, field=field.rstrip(".") or None, source=str(path))


def _validated(model: type[ModelT], value: object, path: Path, prefix: str) -> ModelT:
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise invalid_input(path, exc, prefix) from None


def _note(text: str) -> None:
    print(f"governor: note: {text}", file=sys.stderr)


def decide_explained(
    path: Path, body: dict[str, Any], kind: str, *, config_path: Path | None = None
) -> ExplainedDecision:
    """Decide ``kind`` again from the explain output ``body`` read from ``path``.

    Args:
        path: the file, named in every message.
        body: its parsed JSON (``is_explain_output``).
        kind: the policy kind of the ``governor policy`` command that reads it.
        config_path: a policy config (TOML) whose params to decide with; None: the defaults.

    Raises:
        InvalidInputError: the file is not an explain output of ``kind`` with its snapshot (explain
            prints it with ``--inputs``), a part does not validate, the snapshot is not the one the
            decision read, or it holds no inputs for ``kind`` yet.
    """
    record = _validated(DecisionRecord, body["decision"], path, "decision.")
    if record.kind != kind:
        msg = f"{path}: holds a {record.kind} decision; read it with governor policy {record.kind}, not {kind}"
        raise InvalidInputError(msg, field="decision.kind", value=record.kind, source=str(path))
    if body.get("snapshot") is None:
        msg = f"{path}: field snapshot: missing (governor explain {kind} SCOPE --inputs --json prints it)"
        raise InvalidInputError(msg, field="snapshot", source=str(path))
    snapshot = _validated(EstimateSnapshot, body["snapshot"], path, "snapshot.")
    config, tables = (None, None) if config_path is None else read_config(config_path)
    policies = config_policy_set(tables, source=str(config_path), fleet_slot_s=FLEET_SLOT_S)
    spec = policies.registry.get(kind)
    document = _validated(spec.document_type, record.document, path, "decision.document.")
    if snapshot.snapshot_id != document.inputs.snapshot_id:
        msg = (
            f"{path}: field snapshot.snapshot_id: {snapshot.snapshot_id} is not the snapshot the decision read "
            f"({document.inputs.snapshot_id})"
        )
        raise InvalidInputError(msg, field="snapshot.snapshot_id", value=snapshot.snapshot_id, source=str(path))
    if snapshot.scope != record.scope:
        msg = (
            f"{path}: the {kind} decision of {record.scope} was made from its ranks pooled; the snapshot is "
            f"{snapshot.scope}'s alone, so it cannot be decided again from this file"
        )
        raise InvalidInputError(msg, field="snapshot.scope", value=snapshot.scope, source=str(path))
    previous = _previous(path, body, spec.document_type, document)
    if record.config != policies.digest:
        used = "the default params" if policies.digest is None else f"config {policies.digest}"
        made = "the default params" if record.config is None else f"policy config {record.config}"
        _note(f"the decision was made with {made}; this one with {used} (--config FILE names a config)")
    inputs = spec.inputs_from_snapshot(snapshot)
    if inputs is None:
        msg = f"{path}: snapshot {snapshot.snapshot_id} holds no {kind} inputs yet (too little data)"
        raise InvalidInputError(msg, field="snapshot", source=str(path))
    decision = spec.decide(inputs, previous, snapshot.ts)
    return ExplainedDecision(
        scope=record.scope,
        snapshot_id=snapshot.snapshot_id,
        inputs=inputs,
        decision=decision,
        now_s=snapshot.ts,
        config=config,
    )


def _previous(
    path: Path, body: dict[str, Any], document_type: type[PolicyDocument], document: PolicyDocument
) -> PolicyDocument | None:
    """The document the decision built on, from the file's ``previous``; None (with a note) when absent."""
    if document.previous_version is None:
        return None
    if body.get("previous") is None:
        _note(
            f"decided from a cold start: v{document.version} built on v{document.previous_version}, "
            "which the file does not hold"
        )
        return None
    record = _validated(DecisionRecord, body["previous"], path, "previous.")
    previous = _validated(document_type, record.document, path, "previous.document.")
    if previous.version != document.previous_version or previous.scope != document.scope:
        msg = (
            f"{path}: field previous: {previous.kind} {previous.scope} v{previous.version} is not the version "
            f"the decision built on ({document.scope} v{document.previous_version})"
        )
        raise InvalidInputError(msg, field="previous", value=previous.version, source=str(path))
    return previous
