"""Wiring of the built-in admission-pressure policy: its inputs from an engine summary, its spec."""

from __future__ import annotations

from policies.admission import AdmissionInputs, AdmissionParams
from policies.admission import decide as decide_admission
from schemas.policy_docs import AdmissionPolicy
from schemas.records import EstimateSnapshot
from services.policy.registry import EverySeconds, PolicySpec
from services.policy.wiring.summary import bind_params, number_at

ADMISSION_INTERVAL_S = 5.0


def admission_inputs(snapshot: EstimateSnapshot) -> AdmissionInputs | None:
    """Admission inputs from an engine summary: last queue and KV state, windowed flow rates."""
    s = snapshot.estimates
    waiting = number_at(s, "last_step", "num_waiting")
    running = number_at(s, "last_step", "num_running")
    kv = number_at(s, "last_step", "kv_use_frac")
    arrivals = number_at(s, "arrival_rate_short_per_s")
    completions = number_at(s, "completion_rate_short_per_s")
    if waiting is None or running is None or kv is None or arrivals is None or completions is None:
        return None
    return AdmissionInputs(
        num_waiting=waiting,
        num_running=running,
        kv_use_frac=kv,
        arrival_rate_per_s=arrivals,
        completion_rate_per_s=completions,
    )


def admission_spec(params: AdmissionParams | None = None) -> PolicySpec:
    """Admission pressure per engine, every 5 s of the engine's event time."""
    return PolicySpec(
        kind="admission",
        scope="engine",
        trigger=EverySeconds(seconds=ADMISSION_INTERVAL_S),
        reads=("last_step", "arrival_rate_short_per_s", "completion_rate_short_per_s"),
        document_type=AdmissionPolicy,
        inputs_from_snapshot=admission_inputs,
        decide=bind_params(decide_admission, params or AdmissionParams()),
    )
