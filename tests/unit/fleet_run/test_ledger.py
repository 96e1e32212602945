"""The run's ledger: what each policy decided and who applied it, folded from recorded topic values."""

from __future__ import annotations

import json
from typing import Any

from services.fleet_run.ledger import POLICY_KINDS, ledger_lines, ledger_of

DEP = "fleet-abc"


def _raw(**fields: Any) -> bytes:
    return json.dumps(fields).encode()


def _decision(kind: str, scope: str, version: int, **extra: Any) -> bytes:
    fields: dict[str, Any] = {
        "record_type": "decision",
        "deployment": DEP,
        "kind": kind,
        "scope": scope,
        "version": version,
        "accepted": True,
        "document": {},
        "shadow": None,
    }
    fields.update(extra)
    return _raw(**fields)


def _admission(scope: str, version: int, level: str) -> bytes:
    return _decision("admission", scope, version, document={"payload": {"level": level, "pressure": 1.0}})


def _event(event_type: str, engine_id: str, deployment: str = DEP, **fields: Any) -> bytes:
    return _raw(event_type=event_type, engine_id=engine_id, deployment=deployment, **fields)


class TestLedgerOf:
    def test_decided_and_applied_versions_are_kept_per_scope_and_per_acknowledger(self) -> None:
        decisions = [
            _decision("ebplus", f"{DEP}-rank-0", 2),
            _decision("ebplus", f"{DEP}-rank-0", 1),
            _decision("slai", f"{DEP}-short-0", 1),
            _decision("fleetopt", "fleet", 1),
            _decision("bfio", "fleet-dp", 3),
        ]
        telemetry = [
            _event("policy.applied", f"{DEP}-rank-0", kind="ebplus", scope=f"{DEP}-rank-0", version=1),
            _event("policy.applied", f"{DEP}-rank-0", kind="ebplus", scope=f"{DEP}-rank-0", version=2),
            _event("policy.applied", "gateway-governed-s0", kind="bfio", scope="fleet-dp", version=3),
            _event("policy.applied", "gateway-governed-s0", kind="fleetopt", scope="fleet", version=1),
        ]
        ledger = ledger_of(decisions, telemetry, DEP)
        assert [p.kind for p in ledger.policies] == list(POLICY_KINDS)
        assert ledger.activity("ebplus").decided == {f"{DEP}-rank-0": (1, 2)}
        assert ledger.activity("ebplus").applied == {f"{DEP}-rank-0": (1, 2)}
        assert ledger.activity("slai").decided == {f"{DEP}-short-0": (1,)}
        assert ledger.activity("slai").applied == {}
        assert ledger.activity("bfio").applied == {"gateway-governed-s0": (3,)}
        assert ledger.activity("fleetopt").applied == {"gateway-governed-s0": (1,)}

    def test_other_deployments_shadows_refusals_and_refused_acks_are_left_out(self) -> None:
        decisions = [
            _decision("ebplus", "e", 1, deployment="other"),
            _decision("ebplus", "e", 2, shadow="candidate"),
            _decision("ebplus", "e", 3, accepted=False),
            _decision("scaler", "fleet", 1),
            b"not json",
            b"[1, 2]",
        ]
        telemetry = [
            _event("policy.applied", "e", deployment="other", kind="ebplus", scope="e", version=1),
            _event("policy.applied", "e", kind="ebplus", scope="e", version=3, applied=False),
            _event("step", "e", deployment="other", scheduler_mode="eb"),
        ]
        ledger = ledger_of(decisions, telemetry, DEP)
        assert all(p.decided == {} and p.applied == {} for p in ledger.policies)
        assert ledger.scheduler_steps == {}

    def test_admission_levels_scheduler_modes_and_queueing_are_counted(self) -> None:
        decisions = [
            _admission("short-0", 1, "ok"),
            _admission("short-0", 2, "overloaded"),
            _admission("short-0", 3, "overloaded"),
            _admission("rank-0", 1, "busy"),
        ]
        telemetry = [
            _event("step", "rank-0", scheduler_mode="eb"),
            _event("step", "rank-0", scheduler_mode="mb"),
            _event("step", "rank-0", scheduler_mode="EB"),
            _event("step", "short-0", scheduler_mode=None),
            _event("gateway.queued", "gw", request_id="s0-governed-burst-4", pool="short", queue_depth=1),
            _event("gateway.queued", "gw", request_id="s0-governed-burst-9", pool="short", queue_depth=2),
            _event("gateway.shed", "gw", request_id="s0-governed-burst-9", reason="deadline"),
            _event("gateway.shed", "gw", request_id="s0-governed-burst-11", reason="queue_full"),
            _event("gateway.shed", "gw", request_id="s0-governed-main-2", reason="deadline"),
        ]
        ledger = ledger_of(decisions, telemetry, DEP)
        assert ledger.activity("admission").levels == {"busy": 1, "ok": 1, "overloaded": 2}
        assert ledger.activity("ebplus").levels == {}
        assert ledger.scheduler_steps == {"rank-0": {"EB": 2, "MB": 1}, "short-0": {"unknown": 1}}
        assert ledger.queued == {"s0-governed-burst": 2}
        assert ledger.shed == {
            "s0-governed-burst": {"deadline": 1, "queue_full": 1},
            "s0-governed-main": {"deadline": 1},
        }


def test_ledger_lines_name_every_policy_and_say_when_one_did_nothing() -> None:
    decisions = [_decision("ebplus", f"{DEP}-rank-0", v) for v in (1, 2, 3)] + [_admission(f"{DEP}-short-0", 1, "ok")]
    telemetry = [_event("policy.applied", f"{DEP}-rank-0", kind="ebplus", scope=f"{DEP}-rank-0", version=3)]
    lines = ledger_lines(ledger_of(decisions, telemetry, DEP), strip=f"{DEP}-")
    assert "ebplus     decided: rank-0 v1-v3 (3)" in lines
    assert "           applied: rank-0 v3" in lines
    assert "slai       decided: nothing" in lines
    assert "           levels decided: ok 1" in lines
    assert sum(line.endswith("applied: nobody") for line in lines) == 4
