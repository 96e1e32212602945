"""BF-IO policy documents: the router bundle, its state, central-pool assignments and the what-if inputs.

specs/seed-003-bfio.md sections 6.5 (the pushed bundle and per-request assignment keys) and 1.5 (survival
tables). The bundle is what an engine-side DP router obeys; ``BfioAssignment`` is one short-lived
per-request assignment of the central-pool mode; ``BfioWhatIfInput`` and ``BfioStepInput`` are the JSON
inputs of ``governor policy bfio`` and ``governor bfio assign``.
"""

from __future__ import annotations

import itertools
from typing import Annotated, Literal

from pydantic import Field, model_validator

from schemas.policy_docs.base import ContractModel, PolicyDocument

Tokens = Annotated[float, Field(ge=0.0, le=1e9)]
Fraction = Annotated[float, Field(ge=0.0, le=1.0)]
ModeName = Literal["bfio", "jsq_load", "fcfs"]
WeightSchemeName = Literal["uniform", "decay"]
NewRequestModelName = Literal["const_s", "s_plus_h_survival"]


class SurvivalTableDoc(ContractModel):
    """Kaplan-Meier survival of output length for one traffic class: S(n) = P(O > n) at bin edges.

    S is a right-continuous step function: S(n) = survival_frac[j] on [edges_tokens[j], edges_tokens[j+1]).
    """

    traffic_class: str = Field(min_length=1, max_length=128)
    edges_tokens: list[Tokens] = Field(min_length=1, max_length=4096)
    survival_frac: list[Fraction] = Field(min_length=1, max_length=4096)
    n_samples: int = Field(ge=0, description="requests in the estimate's window, finished or in flight")
    n_censored: int = Field(ge=0, description="of n_samples, right-censored (length/abort finishes, in flight)")

    @model_validator(mode="after")
    def _check_shape(self) -> SurvivalTableDoc:
        if len(self.edges_tokens) != len(self.survival_frac):
            lengths = (len(self.edges_tokens), len(self.survival_frac))
            msg = f"edges_tokens and survival_frac differ in length: {lengths}"
            raise ValueError(msg)
        if any(b <= a for a, b in itertools.pairwise(self.edges_tokens)):
            msg = "edges_tokens must be strictly increasing"
            raise ValueError(msg)
        if any(b > a for a, b in itertools.pairwise(self.survival_frac)):
            msg = "survival_frac must be non-increasing"
            raise ValueError(msg)
        if self.n_censored > self.n_samples:
            msg = f"n_censored ({self.n_censored}) must not exceed n_samples ({self.n_samples})"
            raise ValueError(msg)
        return self


class StepModelDoc(ContractModel):
    """Step-time model Delta_t = C + t_l max_g L_g (paper Eq. 6)."""

    c_s: float = Field(ge=0.0, le=1.0, description="fixed step overhead C, seconds")
    t_l_s_per_token: float = Field(ge=0.0, le=1e-3, description="seconds per resident token on the busiest rank")


class SelfCheckDoc(ContractModel):
    """The lookahead the router shadows against H = 0 (docs/policies/bfio.md, "Online self-check").

    The router applies the bundle's own horizon and solves the other side beside it at every step: H = 0
    while the lookahead is in force, this lookahead while H = 0 is.
    """

    horizon_steps: int = Field(ge=1, le=4096, description="the lookahead H > 0 judged against H = 0")
    horizon_grid_steps: list[int] = Field(min_length=2, max_length=64, description="its offsets h")
    horizon_weights: list[Annotated[float, Field(ge=0.0, le=1e4)]] = Field(min_length=2, max_length=64)
    period_s: float = Field(gt=0.0, le=3600.0, description="event time between the engine's self-check reports")

    @model_validator(mode="after")
    def _check_grid(self) -> SelfCheckDoc:
        grid = self.horizon_grid_steps
        if len(grid) != len(self.horizon_weights):
            msg = "horizon_grid_steps and horizon_weights differ in length"
            raise ValueError(msg)
        if grid[0] != 0 or any(b <= a for a, b in itertools.pairwise(grid)) or grid[-1] != self.horizon_steps:
            msg = f"horizon_grid_steps must start at 0, increase strictly and end at H, got {grid}"
            raise ValueError(msg)
        return self


class BfioPayload(ContractModel):
    """The bundle an engine-side DP router obeys (spec section 6.5)."""

    mode: ModeName
    horizon_steps: int = Field(ge=0, le=4096, description="lookahead H, decode steps")
    horizon_grid_steps: list[int] = Field(min_length=1, max_length=64, description="offsets h where J is evaluated")
    horizon_weights: list[Annotated[float, Field(ge=0.0, le=1e4)]] = Field(min_length=1, max_length=64)
    drift_tokens_per_step: float = Field(ge=0.0, le=1e3)
    new_request_model: NewRequestModelName
    candidate_window: int = Field(ge=1, le=1 << 20)
    aging_deadline_s: float = Field(ge=0.0, le=1e6, description="a request waiting this long is admitted first")
    solver_budget_s: float = Field(ge=0.0, le=10.0, description="per-call solver budget before the fallback")
    local_search_rounds: int = Field(ge=0, le=1 << 20)
    fallback_policy: Literal["jsq_load"] = "jsq_load"
    step_model: StepModelDoc
    survival_tables: list[SurvivalTableDoc] = Field(default_factory=list, max_length=256)
    default_class: str | None = Field(default=None, description="table used for classes without their own")
    self_check: SelfCheckDoc | None = Field(default=None, description="lookahead shadowed against H = 0, if on")

    @model_validator(mode="after")
    def _check_grid(self) -> BfioPayload:
        if len(self.horizon_grid_steps) != len(self.horizon_weights):
            msg = "horizon_grid_steps and horizon_weights differ in length"
            raise ValueError(msg)
        grid = self.horizon_grid_steps
        if grid[0] != 0 or any(b <= a for a, b in itertools.pairwise(grid)) or grid[-1] > self.horizon_steps:
            msg = f"horizon_grid_steps must start at 0, increase strictly and end at most at H, got {grid}"
            raise ValueError(msg)
        classes = [t.traffic_class for t in self.survival_tables]
        if len(set(classes)) != len(classes):
            msg = f"survival_tables repeat a traffic_class: {classes}"
            raise ValueError(msg)
        if self.default_class is not None and self.default_class not in classes:
            msg = f"default_class {self.default_class!r} has no survival table"
            raise ValueError(msg)
        return self


class BfioState(ContractModel):
    """What the next BF-IO bundle decision needs from this one."""

    horizon_steps: int = Field(ge=0, le=4096, description="H in force")
    pending_horizon_steps: int | None = Field(default=None, ge=0, le=4096, description="H proposed, not yet confirmed")
    pending_count: int = Field(default=0, ge=0, description="decisions in a row that proposed pending_horizon_steps")
    decisions: int = Field(default=0, ge=0)
    self_check_myopic: bool = Field(
        default=False, description="the self-check put H = 0 in force in place of horizon_steps"
    )


class BfioPolicy(PolicyDocument):
    """A versioned BF-IO bundle for one DP deployment."""

    kind: Literal["bfio"] = "bfio"
    payload: BfioPayload
    state: BfioState


class SurvivalTableInput(ContractModel):
    """One class's survival table in a what-if estimate snapshot (the same fields the estimator publishes)."""

    traffic_class: str = Field(min_length=1, max_length=128)
    edges_tokens: list[Tokens] = Field(min_length=1, max_length=4096)
    survival_frac: list[Fraction] = Field(min_length=1, max_length=4096)
    n_samples: int = Field(ge=0)
    n_censored: int = Field(ge=0)


class BfioParamsOverride(ContractModel):
    """Optional overrides of BfioParams for a what-if run; omitted fields keep their defaults."""

    horizon_steps: int | None = Field(default=None, ge=0, le=4096)
    dyadic_grid: bool | None = None
    weight_scheme: WeightSchemeName | None = None
    decay_gamma: Fraction | None = None
    new_request_model: NewRequestModelName | None = None
    candidate_window: int | None = Field(default=None, ge=1, le=1 << 20)
    aging_deadline_s: float | None = Field(default=None, ge=0.0, le=1e6)
    solver_budget_s: float | None = Field(default=None, ge=0.0, le=10.0)
    min_survival_events: int | None = Field(default=None, ge=0)


class BfioWhatIfInput(ContractModel):
    """Input of ``governor policy bfio``: an estimate snapshot (the fields of BfioInputs) plus overrides."""

    num_ranks: int = Field(ge=1, le=4096, description="G, data-parallel ranks")
    slots_per_rank: int = Field(ge=1, le=65536, description="B, concurrent requests per rank")
    survival_tables: list[SurvivalTableInput] = Field(default_factory=list, max_length=256)
    default_class: str | None = None
    step_model: StepModelDoc | None = Field(default=None, description="fitted step model; None when not yet fitted")
    now_s: float = Field(default=0.0, ge=0.0, description="event time of the decision, seconds")
    params: BfioParamsOverride | None = None


class WaitingRequestDoc(ContractModel):
    """A request in the central waiting pool."""

    request_id: str = Field(min_length=1, max_length=256)
    prompt_tokens: int = Field(ge=0, le=10_000_000)
    arrival_s: float = Field(ge=0.0, description="event time the request arrived, seconds")
    traffic_class: str | None = Field(default=None, max_length=128)
    max_tokens: int | None = Field(default=None, ge=1)
    output_tokens_hint: int | None = Field(
        default=None,
        ge=1,
        le=10_000_000,
        description="predicted output tokens (a client's or a predictor's estimate, or a tight max_tokens); "
        "the lookahead trusts it while the request is younger",
    )


class ActiveRequestDoc(ContractModel):
    """A request decoding on a rank."""

    prompt_tokens: int = Field(ge=0, le=10_000_000)
    generated_tokens: int = Field(ge=0, le=10_000_000)
    traffic_class: str | None = Field(default=None, max_length=128)
    max_tokens: int | None = Field(default=None, ge=1)
    output_tokens_hint: int | None = Field(
        default=None,
        ge=1,
        le=10_000_000,
        description="predicted output tokens (a client's or a predictor's estimate, or a tight max_tokens); "
        "the lookahead trusts it while the request is younger",
    )


class RankDoc(ContractModel):
    """One DP rank: its active requests and free slots."""

    free_slots: int = Field(ge=0, le=65536)
    active: list[ActiveRequestDoc] = Field(default_factory=list)


class BfioStepInput(ContractModel):
    """Input of ``governor bfio assign``: one decode step's waiting pool and ranks, and the bundle to use."""

    step_index: int = Field(ge=0)
    now_s: float = Field(ge=0.0, description="event time of the step, seconds")
    waiting: list[WaitingRequestDoc] = Field(default_factory=list)
    ranks: list[RankDoc] = Field(min_length=1, max_length=4096)
    bundle: BfioPayload | None = Field(default=None, description="None: the default bundle without survival tables")


class BfioAssignment(ContractModel):
    """A pushed central-pool assignment of one waiting request (spec section 6.5 ``assign`` key)."""

    request_id: str = Field(min_length=1, max_length=256)
    rank: int = Field(ge=0)
    bundle_version: int | None = Field(default=None, ge=1, description="bundle the plan was computed with")
    computed_at_step: int = Field(ge=0)
    valid_until_step: int = Field(ge=0)
    plan_objective_j_tokens: float = Field(ge=0.0, description="predicted J of the whole plan, tokens")
