"""What every policy did in a ``governor fleet up`` run, read back from the run's own Kafka topics.

The policy service appends every decision with its whole document to ``gov.policy.decisions``; engines and
gateways acknowledge each document version they act on with ``policy.applied`` on ``gov.telemetry``, where
the engines' ``step`` events also name the scheduler mode each step ran in and the gateways publish
``gateway.queued`` and ``gateway.shed`` per request. ``ledger_of`` folds those records (raw JSON values, as
read) into, per policy kind (fleetopt, bfio, admission, ebplus, slai): the versions decided per scope and the
versions each engine or gateway acknowledged; the admission levels decided; the steps per scheduler mode of
each engine; and the queued and shed requests per request-id prefix (the client names each phase's requests
``<prefix>-<index>``, services/fleet_run/client.py). It is pure, so it is tested on recorded values;
``read_ledger`` is the one function that reads the broker.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from schemas.names import DECISIONS_TOPIC, TELEMETRY_TOPIC
from schemas.steps import scheduler_mode_label
from services.kafka_security import PLAINTEXT
from services.replay.replay import read_topic
from services.settings import KafkaSecurity

POLICY_KINDS = ("fleetopt", "bfio", "admission", "ebplus", "slai")
_WANTED = (b'"policy.applied"', b'"step"', b'"gateway.queued"', b'"gateway.shed"')


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyActivity:
    """One policy kind over the run.

    Attributes:
        kind: the policy kind.
        decided: scope -> the versions the policy service wrote (accepted decisions), ascending.
        applied: engine or gateway id -> the versions it acknowledged as applied, ascending.
        levels: admission only: level (ok, busy, overloaded) -> decisions with that level.
    """

    kind: str
    decided: dict[str, tuple[int, ...]]
    applied: dict[str, tuple[int, ...]]
    levels: dict[str, int]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunLedger:
    """Every policy's activity, the engines' scheduler modes and the gateways' queueing, over one run.

    Attributes:
        policies: one entry per kind of ``POLICY_KINDS``, in that order.
        scheduler_steps: engine id -> scheduler mode (``eb``, ``mb``, ``slai``, ``stock``) -> steps.
        queued: request-id prefix -> requests a gateway queued (``gateway.queued``).
        shed: request-id prefix -> shed reason -> requests shed (``gateway.shed``).
    """

    policies: tuple[PolicyActivity, ...]
    scheduler_steps: dict[str, dict[str, int]]
    queued: dict[str, int]
    shed: dict[str, dict[str, int]]

    def to_dict(self) -> dict[str, Any]:
        """The ledger as JSON-ready fields."""
        return asdict(self)

    def activity(self, kind: str) -> PolicyActivity:
        """The activity of ``kind`` (one of ``POLICY_KINDS``)."""
        return next(p for p in self.policies if p.kind == kind)


def _prefix(request_id: object) -> str:
    return str(request_id).rpartition("-")[0] or str(request_id)


def _sorted_versions(found: dict[str, set[int]]) -> dict[str, tuple[int, ...]]:
    return {name: tuple(sorted(versions)) for name, versions in sorted(found.items())}


def ledger_of(decisions: Iterable[bytes], telemetry: Iterable[bytes], deployment: str) -> RunLedger:
    """Fold the run's decision records and telemetry events (raw JSON values) of ``deployment``.

    Records of other deployments, shadow decisions, refused (not written) decisions, refused acks and
    values that are not JSON objects are left out.
    """
    decided: dict[str, dict[str, set[int]]] = {kind: {} for kind in POLICY_KINDS}
    applied: dict[str, dict[str, set[int]]] = {kind: {} for kind in POLICY_KINDS}
    levels: dict[str, int] = {}
    for raw in decisions:
        record = _object(raw)
        if record is None or record.get("deployment") != deployment or record.get("shadow") is not None:
            continue
        kind = str(record.get("kind"))
        if kind not in decided or not record.get("accepted"):
            continue
        decided[kind].setdefault(str(record.get("scope")), set()).add(int(record["version"]))
        payload = (record.get("document") or {}).get("payload") or {}
        if kind == "admission" and "level" in payload:
            levels[str(payload["level"])] = levels.get(str(payload["level"]), 0) + 1
    modes: dict[str, dict[str, int]] = {}
    queued: dict[str, int] = {}
    shed: dict[str, dict[str, int]] = {}
    for raw in telemetry:
        if not any(marker in raw for marker in _WANTED):
            continue
        event = _object(raw)
        if event is None or event.get("deployment") != deployment:
            continue
        event_type = event.get("event_type")
        source = str(event.get("engine_id"))
        if event_type == "policy.applied" and event.get("applied", True) and event.get("kind") in applied:
            applied[str(event["kind"])].setdefault(source, set()).add(int(event["version"]))
        elif event_type == "step":
            mode = scheduler_mode_label(str(event.get("scheduler_mode") or "unknown"))
            counts = modes.setdefault(source, {})
            counts[mode] = counts.get(mode, 0) + 1
        elif event_type == "gateway.queued":
            prefix = _prefix(event.get("request_id"))
            queued[prefix] = queued.get(prefix, 0) + 1
        elif event_type == "gateway.shed":
            reasons = shed.setdefault(_prefix(event.get("request_id")), {})
            reasons[str(event.get("reason"))] = reasons.get(str(event.get("reason")), 0) + 1
    return RunLedger(
        policies=tuple(
            PolicyActivity(
                kind=kind,
                decided=_sorted_versions(decided[kind]),
                applied=_sorted_versions(applied[kind]),
                levels=dict(sorted(levels.items())) if kind == "admission" else {},
            )
            for kind in POLICY_KINDS
        ),
        scheduler_steps={engine: dict(sorted(m.items())) for engine, m in sorted(modes.items())},
        queued=dict(sorted(queued.items())),
        shed={prefix: dict(sorted(r.items())) for prefix, r in sorted(shed.items())},
    )


def _object(raw: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def read_ledger(bootstrap: str, deployment: str, security: KafkaSecurity = PLAINTEXT) -> RunLedger:
    """The ledger of ``deployment`` from the broker at ``bootstrap`` (both topics read from the beginning).

    Raises:
        BackendUnavailableError: the broker did not answer.
        InvalidInputError: a topic does not exist.
    """
    return ledger_of(
        read_topic(bootstrap, DECISIONS_TOPIC, security=security),
        read_topic(bootstrap, TELEMETRY_TOPIC, security=security),
        deployment,
    )


def _span(versions: tuple[int, ...]) -> str:
    if len(versions) == 1:
        return f"v{versions[0]}"
    return f"v{versions[0]}-v{versions[-1]} ({len(versions)})"


def _short(name: str, strip: str) -> str:
    return name.removeprefix(strip)


def ledger_lines(ledger: RunLedger, *, strip: str = "") -> list[str]:
    """Per policy, what was decided and who applied it; then the engines' scheduler modes.

    ``strip`` is removed from the front of engine and gateway ids (the run's deployment prefix). A policy
    nothing decided says so: it did not act in the run.
    """
    lines = []
    for activity in ledger.policies:
        decided = "; ".join(f"{_short(s, strip)} {_span(v)}" for s, v in activity.decided.items()) or "nothing"
        applied = "; ".join(f"{_short(a, strip)} {_span(v)}" for a, v in activity.applied.items()) or "nobody"
        lines.append(f"{activity.kind:9}  decided: {decided}")
        lines.append(f"{'':9}  applied: {applied}")
        if activity.levels:
            shown = ", ".join(f"{level} {count}" for level, count in activity.levels.items())
            lines.append(f"{'':9}  levels decided: {shown}")
    for engine, modes in ledger.scheduler_steps.items():
        shown = ", ".join(f"{mode} {count:,}" for mode, count in modes.items())
        lines.append(f"steps of {_short(engine, strip)} by scheduler mode: {shown}")
    return lines
