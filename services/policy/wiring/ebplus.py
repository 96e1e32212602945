"""Wiring of EB+ (seed 001): its inputs from an engine summary, and its spec (every T_upd completions).

The inputs are the ones Algorithm 1 and Eq. 8 read (specs/seed-001-ebplus.md sections 3.1, 4.2): the
censoring-aware hazard fit (p0, eta), mu_L, mu_O (completed outputs), N_obs (asymmetric EMA of
running + waiting per step), the KV capacity C in tokens, max_num_seqs, the completion count that
paces Algorithm 1, and the cost model of the engine's calibration profile (or the online fits); the
TBT guard (policies/ebplus/tbt_guard.py) also reads the tightest TBT SLO among the engine's tiers and
its token budget.

Deviation: a hazard fit with p0 <= 0 (bounded-support lengths such as the paper's uniform +-25%
distribution-shift outputs give a negative intercept, spec Appendix A item 4) is floored to
1 / mu_O here, the reference estimator's geometric floor, instead of skipping the decision; without
it an engine under such a workload would never get a policy and stay on the MB fallback.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from policies.ebplus import BetaMbQuadratic, CostModel, EbplusInputs, EbplusParams
from policies.ebplus import decide as decide_ebplus
from policies.ebplus.calibration import CALIBRATION_PROFILES
from schemas.policy_docs import EbplusPolicy
from schemas.records import EstimateSnapshot
from services.policy.registry import EveryEvents, PolicySpec, engine_obeys
from services.policy.wiring.summary import bind_params, number_at


def _cost_model(s: dict[str, Any]) -> CostModel | None:
    """The online cost model when prefill and decode fits both exist and are physical, else None."""
    alpha_p = number_at(s, "cost", "prefill", "alpha_s")
    beta_p = number_at(s, "cost", "prefill", "beta_s_per_unit")
    alpha_d = number_at(s, "cost", "decode", "alpha_s")
    beta_d = number_at(s, "cost", "decode", "beta_s_per_unit")
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

    The cost model is the engine's registered calibration profile, else (an engine with no profile,
    such as a real vLLM engine on hardware we have not calibrated) the online fits from its step
    events once prefill and decode fits both exist, else None, which falls back to the params'
    profile (with ``calibration_id=None``, the EB probe that collects the missing fits);
    ``online_cost_model`` ignores registered profiles. Calibration is preferred because a
    running engine under mixed batching sees few pure-prefill batches to fit alpha_p from (spec
    seed-001 P15). The KV capacity is the registered
    kv_blocks_total * block_size_tokens, else the last step's.

    Returns:
        the inputs, or None while the engine has no hazard fit, no mean lengths, no N_obs or no
        KV capacity yet.
    """
    s = snapshot.estimates
    p0 = number_at(s, "hazard", "p0")
    eta = number_at(s, "hazard", "eta")
    samples = number_at(s, "hazard", "n_samples")
    mu_l = number_at(s, "mu_l_tokens")
    mu_o = number_at(s, "mu_o_tokens")
    n_obs = number_at(s, "n_obs")
    kv = _kv_capacity_tokens(s)
    max_seqs = number_at(s, "engine", "max_num_seqs")
    completions = number_at(s, "completions_total")
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
        or mu_l <= 0.0
        or mu_o <= 0.0
    ):
        return None
    cost = _cost_model(s) if online_cost_model else (_registered_calibration(s) or _cost_model(s))
    return EbplusInputs(
        p0=min(1.0, p0 if p0 > 0.0 else 1.0 / mu_o),
        eta=eta,
        hazard_samples=int(samples),
        mu_l_tokens=mu_l,
        mu_o_tokens=mu_o,
        n_obs=n_obs,
        cost_model=cost,
        kv_capacity_tokens=int(kv),
        max_num_seqs=int(max_seqs),
        completions=int(completions),
        tbt_slo_min_s=_tightest_tbt_slo_s(s),
        token_budget_tokens=_token_budget_tokens(s),
    )


def _tightest_tbt_slo_s(s: dict[str, Any]) -> float | None:
    """The smallest positive ``tbt_slo_s`` among the engine's tiers (the EB+ TBT guard's bound), or None."""
    tiers = s.get("tiers")
    if not isinstance(tiers, dict):
        return None
    slos = [number_at(tier, "tbt_slo_s") for tier in tiers.values() if isinstance(tier, dict)]
    positive = [slo for slo in slos if slo is not None and slo > 0.0]
    return min(positive) if positive else None


def _token_budget_tokens(s: dict[str, Any]) -> int | None:
    budget = number_at(s, "engine", "max_num_batched_tokens")
    return int(budget) if budget is not None and budget >= 1 else None


def _kv_capacity_tokens(s: dict[str, Any]) -> float | None:
    blocks = number_at(s, "engine", "kv_blocks_total")
    block_size = number_at(s, "engine", "block_size_tokens")
    if blocks is not None and block_size is not None and blocks * block_size > 0:
        return blocks * block_size
    kv = number_at(s, "last_step", "kv_capacity_tokens")
    return kv if kv is not None and kv > 0 else None


def _registered_calibration(s: dict[str, Any]) -> CostModel | None:
    """The calibration named by the engine's ``hardware_profile``, else by ``<model>@<gpu>``, else None."""
    engine = s.get("engine")
    if not isinstance(engine, dict):
        return None
    candidates = [engine.get("hardware_profile")]
    model, gpu = engine.get("model"), engine.get("gpu")
    if isinstance(model, str) and isinstance(gpu, str):
        candidates.append(f"{model}@{gpu}".lower())
    for calib_id in candidates:
        if isinstance(calib_id, str) and calib_id in CALIBRATION_PROFILES:
            return CALIBRATION_PROFILES[calib_id].cost_model
    return None


def ebplus_spec(params: EbplusParams | None = None, *, online_cost_model: bool = False) -> PolicySpec:
    """EB+ per engine, every ``t_upd_completions`` finished requests of the engine (Alg. 1).

    ``online_cost_model`` makes every engine decide from the cost model fitted from its own step
    events (``ebplus_inputs``), whatever calibration it registered.
    """
    ebplus_params = params or EbplusParams()
    return PolicySpec(
        kind="ebplus",
        scope="engine",
        trigger=EveryEvents(event_type="request.finished", n=ebplus_params.t_upd_completions),
        reads=(
            "hazard",
            "mu_l_tokens",
            "mu_o_tokens",
            "n_obs",
            "last_step",
            "engine",
            "completions_total",
            "cost",
            "tiers",
        ),
        document_type=EbplusPolicy,
        inputs_from_snapshot=partial(ebplus_inputs, online_cost_model=online_cost_model),
        decide=bind_params(decide_ebplus, ebplus_params),
        applies_to=engine_obeys("ebplus"),
    )
