"""Wiring of the built-in admission-pressure policy: its inputs from an engine summary, its spec."""

from __future__ import annotations

from decide.registry import PolicySpec
from decide.wiring.summary import bind_params, engine_summary
from fold.triggers import EverySeconds
from policies.admission import AdmissionInputs, AdmissionParams
from policies.admission import decide as decide_admission
from schemas.policy_docs import AdmissionPolicy
from schemas.records import EstimateSnapshot

ADMISSION_INTERVAL_S = 5.0


def admission_inputs(snapshot: EstimateSnapshot) -> AdmissionInputs | None:
    """Admission inputs from an engine summary: last queue and KV state, windowed flow rates."""
    s = engine_summary(snapshot)
    step = s.last_step
    if step is None:
        return None
    return AdmissionInputs(
        num_waiting=float(step.waiting_requests),
        num_running=float(step.running_requests),
        kv_use_frac=step.kv_use_frac,
        arrival_rate_per_s=s.arrival_rate_short_per_s,
        completion_rate_per_s=s.completion_rate_short_per_s,
    )


def admission_spec(params: AdmissionParams | None = None) -> PolicySpec:
    """Admission pressure per engine, every 5 s of the engine's event time."""
    return PolicySpec(
        kind="admission",
        scope="engine",
        trigger=EverySeconds(seconds=ADMISSION_INTERVAL_S),
        document_type=AdmissionPolicy,
        inputs_from_snapshot=admission_inputs,
        decide=bind_params(decide_admission, params or AdmissionParams()),
    )
