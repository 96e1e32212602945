"""The policies a deployment runs: each paper's policy as a ``PolicySpec``, with its inputs built from snapshots.

``inputs_from_snapshot`` functions read only the snapshot's JSON summary
(services/stream/estimates.py), so a snapshot replayed from ``gov.estimates`` decides exactly as it
did live. Each returns None when the summary lacks what the policy needs (not enough data yet).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from policies.admission import AdmissionInputs, AdmissionParams
from policies.admission import decide as decide_admission
from policies.decision import Decision
from policies.ebplus import BetaMbQuadratic, CostModel, EbplusInputs, EbplusParams
from policies.ebplus import decide as decide_ebplus
from policies.ebplus.calibration import CALIBRATION_PROFILES
from schemas.policy_docs import AdmissionPolicy, EbplusPolicy
from schemas.records import EstimateSnapshot
from services.policy.registry import EveryEvents, EverySeconds, PolicyRegistry, PolicySpec

ADMISSION_INTERVAL_S = 5.0


def _number(data: Any, *path: str) -> float | None:
    for key in path:
        if not isinstance(data, dict) or data.get(key) is None:
            return None
        data = data[key]
    return float(data) if isinstance(data, int | float) and not isinstance(data, bool) else None


def admission_inputs(snapshot: EstimateSnapshot) -> AdmissionInputs | None:
    """Admission inputs from an engine summary: last queue and KV state, windowed flow rates."""
    s = snapshot.estimates
    waiting = _number(s, "last_step", "num_waiting")
    running = _number(s, "last_step", "num_running")
    kv = _number(s, "last_step", "kv_use_frac")
    arrivals = _number(s, "arrival_rate_short_per_s")
    completions = _number(s, "completion_rate_short_per_s")
    if waiting is None or running is None or kv is None or arrivals is None or completions is None:
        return None
    return AdmissionInputs(
        num_waiting=waiting,
        num_running=running,
        kv_use_frac=kv,
        arrival_rate_per_s=arrivals,
        completion_rate_per_s=completions,
    )


def _cost_model(s: dict[str, Any]) -> CostModel | None:
    """The online cost model when prefill and decode fits both exist and are physical, else None."""
    alpha_p = _number(s, "cost", "prefill", "alpha_s")
    beta_p = _number(s, "cost", "prefill", "beta_s_per_unit")
    alpha_d = _number(s, "cost", "decode", "alpha_s")
    beta_d = _number(s, "cost", "decode", "beta_s_per_unit")
    if alpha_p is None or beta_p is None or alpha_d is None or beta_d is None:
        return None
    if alpha_p <= 0.0 or alpha_d <= 0.0 or beta_p < 0.0 or beta_d < 0.0:
        return None
    mb = s.get("cost", {}).get("beta_mb")
    beta_mb = None
    alpha_mb = alpha_p
    if isinstance(mb, dict):
        beta_mb = BetaMbQuadratic(c0_s_per_token=mb["a"], c1_s_per_token=mb["b"], c2_s_per_token=mb["c"])
        alpha_mb = max(0.0, float(mb["alpha_mb_s"]))
    return CostModel(
        alpha_p_s=alpha_p,
        beta_p_s_per_token=beta_p,
        alpha_d_s=alpha_d,
        beta_d_s_per_seq=beta_d,
        alpha_mb_s=alpha_mb,
        beta_mb=beta_mb,
    )


def ebplus_inputs(snapshot: EstimateSnapshot, *, online_cost_model: bool = False) -> EbplusInputs | None:
    """EB+ inputs: the censoring-aware hazard fit, mu_L, mu_O, N_obs, KV capacity and the cost model.

    The cost model is the engine's registered calibration profile (or, with ``online_cost_model``,
    the online fits from its step events); None falls back to the params' profile. Calibration is
    preferred by default because a running engine under mixed batching sees few pure-prefill
    batches to fit alpha_p from (spec seed-001 P15).
    """
    s = snapshot.estimates
    p0 = _number(s, "hazard", "p0")
    eta = _number(s, "hazard", "eta")
    samples = _number(s, "hazard", "n_samples")
    mu_l = _number(s, "mu_l_tokens")
    mu_o = _number(s, "mu_o_tokens")
    n_obs = _number(s, "n_obs")
    kv = _number(s, "last_step", "kv_capacity_tokens")
    max_seqs = _number(s, "engine", "max_num_seqs")
    completions = _number(s, "completions_total")
    if (
        p0 is None
        or eta is None
        or samples is None
        or mu_l is None
        or mu_o is None
        or n_obs is None
        or kv is None
        or max_seqs is None
        or completions is None
        or p0 <= 0.0
        or mu_l <= 0.0
        or mu_o <= 0.0
    ):
        return None
    cost = _cost_model(s) if online_cost_model else _registered_calibration(s)
    return EbplusInputs(
        p0=p0,
        eta=eta,
        hazard_samples=int(samples),
        mu_l_tokens=mu_l,
        mu_o_tokens=mu_o,
        n_obs=n_obs,
        cost_model=cost,
        kv_capacity_tokens=int(kv),
        max_num_seqs=int(max_seqs),
        completions=int(completions),
    )


def _registered_calibration(s: dict[str, Any]) -> CostModel | None:
    engine = s.get("engine")
    profile = engine.get("hardware_profile") if isinstance(engine, dict) else None
    if isinstance(profile, str) and profile in CALIBRATION_PROFILES:
        return CALIBRATION_PROFILES[profile].cost_model
    return None


InputsT = TypeVar("InputsT")
ParamsT = TypeVar("ParamsT")


def bind_params(
    decide: Callable[[InputsT, Any, ParamsT, float], Decision[Any, Any]], params: ParamsT
) -> Callable[[InputsT, Any, float], Decision[Any, Any]]:
    """Bind a paper's ``decide(inputs, previous, params, now_s)`` to its params for the registry."""

    def bound(inputs: InputsT, previous: Any, now_s: float) -> Decision[Any, Any]:
        return decide(inputs, previous, params, now_s)

    return bound


def default_registry(ebplus: EbplusParams | None = None, admission: AdmissionParams | None = None) -> PolicyRegistry:
    """The registry a deployment runs by default: admission pressure and EB+ per engine."""
    ebplus_params = ebplus or EbplusParams()
    return PolicyRegistry(
        [
            PolicySpec(
                kind="admission",
                scope="engine",
                trigger=EverySeconds(seconds=ADMISSION_INTERVAL_S),
                reads=("last_step", "arrival_rate_short_per_s", "completion_rate_short_per_s"),
                document_type=AdmissionPolicy,
                inputs_from_snapshot=admission_inputs,
                decide=bind_params(decide_admission, admission or AdmissionParams()),
            ),
            PolicySpec(
                kind="ebplus",
                scope="engine",
                trigger=EveryEvents(event_type="request.finished", n=ebplus_params.t_upd_completions),
                reads=("hazard", "mu_l_tokens", "mu_o_tokens", "n_obs", "last_step", "engine", "completions_total"),
                document_type=EbplusPolicy,
                inputs_from_snapshot=ebplus_inputs,
                decide=bind_params(decide_ebplus, ebplus_params),
            ),
        ]
    )
