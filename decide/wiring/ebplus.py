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

from decide.registry import PolicySpec, engine_obeys
from decide.wiring.summary import bind_params, engine_summary
from fold.triggers import EveryEvents
from policies.ebplus import BetaMbQuadratic, CostModel, EbplusInputs, EbplusParams
from policies.ebplus import decide as decide_ebplus
from policies.ebplus.calibration import CALIBRATION_PROFILES
from policies.ebplus.inputs import ONLINE_CALIB_ID
from schemas.estimates import EngineRegistration, EngineSummary
from schemas.policy_docs import EbplusPolicy
from schemas.records import EstimateSnapshot


def _cost_model(s: EngineSummary) -> CostModel | None:
    """The online cost model when prefill and decode fits both exist and are physical, else None."""
    prefill, decode, mb = s.cost.prefill, s.cost.decode, s.cost.beta_mb
    if prefill is None or decode is None:
        return None
    if prefill.alpha_s <= 0.0 or decode.alpha_s <= 0.0 or prefill.beta_s_per_unit < 0.0 or decode.beta_s_per_unit < 0.0:
        return None
    beta_mb = None
    alpha_mb = prefill.alpha_s
    if mb is not None:
        beta_mb = BetaMbQuadratic(
            c0_s_per_token=mb.c0_s_per_token, c1_s_per_token=mb.c1_s_per_token, c2_s_per_token=mb.c2_s_per_token
        )
        alpha_mb = max(0.0, mb.alpha_mb_s)
    return CostModel(
        alpha_p_s=prefill.alpha_s,
        beta_p_s_per_token=prefill.beta_s_per_unit,
        alpha_d_s=decode.alpha_s,
        beta_d_s_per_seq=decode.beta_s_per_unit,
        alpha_mb_s=alpha_mb,
        beta_mb=beta_mb,
    )


def ebplus_inputs(snapshot: EstimateSnapshot, *, online_cost_model: bool = False) -> EbplusInputs | None:
    """EB+ inputs: the censoring-aware hazard fit, mu_L, mu_O, N_obs, KV capacity and the cost model.

    The cost model is the engine's registered calibration profile (``_declared_calibration_ids``),
    else (an engine with no known profile, such as a real vLLM engine on hardware we have not
    calibrated) the online fits from its step events once prefill and decode fits both exist, else
    None: the EB probe that collects the missing fits, or a profile the operator named in the params,
    which the decision marks as assumed (policies/ebplus/decide.py). Never a fixed profile.
    ``online_cost_model`` ignores registered profiles. Calibration is preferred because a running
    engine under mixed batching sees few pure-prefill batches to fit alpha_p from (spec seed-001
    P15). The KV capacity is the registered kv_blocks_total * block_size_tokens, else the last step's.

    Returns:
        the inputs, or None while the engine has no hazard fit, no mean lengths, no N_obs or no
        KV capacity yet.
    """
    s = engine_summary(snapshot)
    hazard, engine = s.hazard, s.engine
    mu_l, mu_o, n_obs = s.mu_l_tokens, s.mu_o_tokens, s.n_obs_requests
    kv = _kv_capacity_tokens(s)
    if (
        hazard is None
        or mu_l is None
        or mu_o is None
        or n_obs is None
        or kv is None
        or engine is None
        or mu_l <= 0.0
        or mu_o <= 0.0
    ):
        return None
    p0 = hazard.p0_per_token
    registered = None if online_cost_model else _registered_calibration(engine)
    cost, cost_id = registered if registered is not None else (_cost_model(s), ONLINE_CALIB_ID)
    return EbplusInputs(
        p0=min(1.0, p0 if p0 > 0.0 else 1.0 / mu_o),
        eta=hazard.eta_per_token2,
        hazard_samples=hazard.n_samples,
        mu_l_tokens=mu_l,
        mu_o_tokens=mu_o,
        n_obs=n_obs,
        cost_model=cost,
        kv_capacity_tokens=kv,
        max_num_seqs=engine.max_num_seqs,
        completions=s.completions_total,
        tbt_slo_min_s=_tightest_tbt_slo_s(s),
        token_budget_tokens=engine.max_num_batched_tokens if engine.max_num_batched_tokens >= 1 else None,
        cost_model_id=cost_id,
        declared_profile=engine.hardware_profile,
    )


def _tightest_tbt_slo_s(s: EngineSummary) -> float | None:
    """The smallest positive ``tbt_slo_s`` among the engine's tiers (the EB+ TBT guard's bound), or None."""
    positive = [t.tbt_slo_s for t in s.tiers.values() if t.tbt_slo_s is not None and t.tbt_slo_s > 0.0]
    return min(positive) if positive else None


def _kv_capacity_tokens(s: EngineSummary) -> int | None:
    """The registered kv_blocks_total * block_size_tokens, else the last step's KV capacity, else None."""
    engine, step = s.engine, s.last_step
    if engine is not None and engine.kv_blocks_total * engine.block_size_tokens > 0:
        return engine.kv_blocks_total * engine.block_size_tokens
    if step is not None and step.kv_capacity_tokens > 0:
        return step.kv_capacity_tokens
    return None


def _declared_calibration_ids(engine: EngineRegistration) -> tuple[str, ...]:
    """The calibration ids an engine's registration declares, in the order they are tried.

    First its ``hardware_profile`` (``GOVERNOR_HARDWARE_PROFILE``), then ``<model>@<gpu>`` from what it
    registered: the model's last path part (a vLLM engine registers its served name, often a Hugging
    Face ``org/name`` or a local directory) and the GPU with spaces as dashes and no ``nvidia-`` vendor
    prefix (``NVIDIA H200`` as nvidia-smi prints it is ``h200``), both in lower case as the profiles'
    ids are. Nothing is guessed beyond that: a GPU or model that names no profile this way gets none.
    """
    model = engine.model.rstrip("/").rsplit("/", 1)[-1].lower()
    gpu = "-".join(engine.gpu.lower().replace("_", " ").split()).removeprefix("nvidia-")
    ids = [engine.hardware_profile] if engine.hardware_profile is not None else []
    ids.append(f"{model}@{gpu}")
    return tuple(dict.fromkeys(ids))


def _registered_calibration(engine: EngineRegistration) -> tuple[CostModel, str] | None:
    """The first known calibration among those the registration declares, with its id; else None."""
    for calib_id in _declared_calibration_ids(engine):
        if calib_id in CALIBRATION_PROFILES:
            return CALIBRATION_PROFILES[calib_id].cost_model, calib_id
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
        document_type=EbplusPolicy,
        inputs_from_snapshot=partial(ebplus_inputs, online_cost_model=online_cost_model),
        decide=bind_params(decide_ebplus, ebplus_params),
        applies_to=engine_obeys("ebplus"),
    )
