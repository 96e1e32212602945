"""FleetOpt plan document and what-if input (seed 002 Algorithm 1; spec seed-002 sections 5.3-5.4).

``FleetoptPayload`` is the plan of spec section 5.3: gateways read ``routing``, provisioners read
``fleet``, engines read their pool's ``n_max_slots`` and ``c_max_tokens``. ``FleetoptState``
carries the hysteresis memory between decisions. ``FleetoptWhatIfInput`` is the JSON file
``governor policy fleetopt --input`` reads.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from schemas.policy_docs.base import ContractModel, PolicyDocument

PlannerModeName = Literal["paper", "exact"]


class FleetoptRouting(ContractModel):
    """The fast routing knobs gateways obey (seed 002 section 5.1, Eq. 15)."""

    b_short_tokens: int = Field(ge=1, le=1_048_576, description="B_short: requests with L_total <= B go short")
    gamma: float = Field(ge=1.0, le=4.0, description="compression bandwidth ratio; the band is (B, gamma*B]")
    gamma_b_tokens: int = Field(ge=1, le=4_194_304, description="floor(gamma * B_short), the band's integer top")
    safe_categories: list[str] = Field(description="categories that may be compressed to T_c = B_short - L_out")


class FleetoptPoolSpec(ContractModel):
    """Size and engine configuration of one pool."""

    n_gpus: int = Field(ge=0, le=1_000_000, description="GPUs (profile units) of the pool")
    n_max_slots: int = Field(ge=1, le=1_000_000, description="KV slots per GPU (max_num_seqs)")
    c_max_tokens: int = Field(ge=1, le=1_048_576, description="context window (max_model_len)")


class FleetoptFleet(ContractModel):
    """The slow provisioning half of the plan: both pools."""

    short: FleetoptPoolSpec
    long: FleetoptPoolSpec


class FleetoptPlanInputs(ContractModel):
    """The workload figures the plan was computed from (Eqs. 1, 2, 14)."""

    arrival_rate_per_s: float = Field(ge=0.0)
    alpha: float = Field(ge=0.0, le=1.0, description="F(B_short)")
    beta: float = Field(ge=0.0, le=1.0, description="F(gamma*B) - F(B)")
    p_c: float = Field(ge=0.0, le=1.0)
    alpha_prime: float = Field(ge=0.0, le=1.0, description="alpha + beta * p_c")
    t_slo_s: float = Field(gt=0.0)
    rho_max: float = Field(gt=0.0, lt=1.0)


class FleetoptPoolPrediction(ContractModel):
    """What the model predicts for one pool at the pushed size (DESIGN principle 6)."""

    arrival_rate_per_s: float = Field(ge=0.0)
    mu_gpu_per_s: float = Field(ge=0.0, description="n_max / E[S]; 0 for an empty pool")
    cv2: float = Field(ge=0.0, description="Cs^2 of the slot holding time")
    util_frac: float = Field(ge=0.0, description="lambda / (n mu_gpu), Table 5's rho_ana")
    p99_ttft_s: float | None = Field(ge=0.0, description="predicted P99 TTFT; None when the pool cannot keep up")


class FleetoptPredictions(ContractModel):
    """Per-pool predictions."""

    short: FleetoptPoolPrediction
    long: FleetoptPoolPrediction


class FleetoptCost(ContractModel):
    """Cost of the pushed fleet and its savings against the homogeneous fleet (Table 3)."""

    usd_per_hr: float = Field(ge=0.0)
    annual_kusd: float = Field(ge=0.0)
    homogeneous_gpus: int = Field(ge=1)
    savings_frac: float = Field(ge=-1000.0, le=1.0, description="(homo - total) / homo on GPU counts")


class FleetoptPayload(ContractModel):
    """The fleet plan engines, gateways and provisioners obey (spec section 5.3)."""

    mode: PlannerModeName
    routing: FleetoptRouting
    fleet: FleetoptFleet
    inputs: FleetoptPlanInputs
    predictions: FleetoptPredictions
    cost: FleetoptCost
    slo_met: bool = Field(description="both pools' predicted P99 TTFT within T_slo at the pushed sizes")


class FleetoptPoolHold(ContractModel):
    """Hysteresis memory of one pool's size (spec section 5.4)."""

    n_gpus: int = Field(ge=0, description="the size last pushed")
    pending_since_s: float | None = Field(default=None, ge=0.0, description="event time a scale-down was first wanted")
    pending_runs: int = Field(default=0, ge=0, description="consecutive runs that wanted a scale-down")
    pending_max_gpus: int = Field(default=0, ge=0, description="largest target seen while the scale-down was pending")


class FleetoptState(ContractModel):
    """What the next decision needs: the held boundary and both pools' hysteresis memory."""

    b_short_tokens: int = Field(ge=1, description="the B_short in force")
    b_short_since_s: float = Field(ge=0.0, description="event time B_short took effect, seconds")
    short: FleetoptPoolHold
    long: FleetoptPoolHold


class FleetoptPolicy(PolicyDocument):
    """The versioned FleetOpt document the runtime publishes."""

    kind: Literal["fleetopt"] = "fleetopt"
    payload: FleetoptPayload
    state: FleetoptState


class FleetoptParamsOverrides(ContractModel):
    """Optional overrides of ``FleetoptParams`` in a what-if file; unset fields keep the paper's defaults."""

    mode: PlannerModeName | None = None
    t_slo_s: float | None = Field(default=None, gt=0.0, le=3600.0)
    rho_max: float | None = Field(default=None, gt=0.0, lt=1.0)
    gammas: list[float] | None = Field(default=None, min_length=1)
    b_short_candidates_tokens: list[int] | None = None
    max_short_ctx_tokens: int | None = Field(default=None, ge=1)
    w_s: float | None = Field(default=None, gt=0.0)
    h_s_per_slot: float | None = Field(default=None, gt=0.0)
    chunk_tokens: int | None = Field(default=None, ge=1)
    calib_slots: int | None = Field(default=None, ge=1)
    calib_ctx_tokens: int | None = Field(default=None, ge=1)
    kv_blocks: int | None = Field(default=None, ge=1)
    kv_block_tokens: int | None = Field(default=None, ge=1)
    long_ctx_tokens: int | None = Field(default=None, ge=1)
    short_cost_usd_per_hr: float | None = Field(default=None, gt=0.0)
    long_cost_usd_per_hr: float | None = Field(default=None, gt=0.0)


class FleetoptWhatIfInput(ContractModel):
    """The what-if input: an estimate snapshot (the fields of ``FleetoptInputs``) plus parameter overrides.

    Give the length CDF inline (``cdf``: ``[[tokens, frac], ...]``) or as ``cdf_file``, a path relative
    to the input file to a CDF file (a bare array, or an object with a ``cdf`` array).
    """

    arrival_rate_per_s: float = Field(gt=0.0, description="fleet arrival rate lambda, req/s")
    cdf: list[tuple[int, float]] | None = Field(default=None, min_length=1)
    cdf_file: str | None = Field(default=None, min_length=1)
    p_c: float = Field(default=1.0, ge=0.0, le=1.0, description="effective compressibility of borderline traffic")
    input_frac: float = Field(default=0.8, ge=0.5, le=0.99, description="E[l_in / L_total]")
    params: FleetoptParamsOverrides = Field(default_factory=FleetoptParamsOverrides)

    @model_validator(mode="after")
    def _one_cdf_source(self) -> FleetoptWhatIfInput:
        if (self.cdf is None) == (self.cdf_file is None):
            msg = "give exactly one of cdf and cdf_file"
            raise ValueError(msg)
        return self
