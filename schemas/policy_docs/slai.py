"""The SLAI policy document and the what-if input (specs/seed-000-slai.md §3.4; paper §6-7.1).

``SlaiPayload`` is what an engine obeys: the offset rule (fixed delta, or delta_lo / delta_hi
switched at a KV-use threshold, paper §7.1), an optional delta override, the tier -> TBT map, the
token budget, the caps alpha and beta and the prefill order. delta is a multiple of the mean batch
time, never seconds (spec §8 P1). The engine keeps the per-iteration deadline bookkeeping.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from schemas.policy_docs.base import ContractModel, PolicyDocument

Delta = Annotated[float, Field(ge=0.0, le=100.0, description="offset, a multiple of the mean batch time")]
Seconds = Annotated[float, Field(ge=0.0, le=86_400.0)]
TbtSeconds = Annotated[float, Field(gt=0.0, le=60.0)]
Fraction = Annotated[float, Field(ge=0.0, le=1.0)]
OffsetModeName = Literal["fixed", "dynamic"]
PrefillOrderName = Literal["spf", "fcfs", "spf_paid_first"]


class SlaiPayload(ContractModel):
    """What every engine applies between batches (spec §3.4 division of labour)."""

    mode: OffsetModeName = Field(description="fixed: delta_fixed always; dynamic: the KV-threshold rule")
    delta_fixed: Delta
    delta_lo: Delta = Field(description="dynamic delta while KV-block use < kv_threshold_frac")
    delta_hi: Delta = Field(description="dynamic delta while KV-block use >= kv_threshold_frac")
    kv_threshold_frac: float = Field(gt=0.0, le=1.0, description="used / total KV blocks of the switch")
    delta_override: Delta | None = Field(default=None, description="when set, the delta in every mode")
    tier_tbt_s: dict[str, TbtSeconds] = Field(min_length=1, description="tier -> TBT SLO, seconds")
    default_tbt_s: TbtSeconds = Field(description="TBT of a request whose tier is not in tier_tbt_s, seconds")
    token_budget_tokens: int = Field(ge=1, le=65_536)
    max_active: int = Field(ge=1, le=65_536, description="alpha: requests holding KV")
    max_decodes: int = Field(ge=1, le=65_536, description="beta: decodes per batch")
    prefill_order: PrefillOrderName
    tbar_seed_s: Seconds | None = Field(default=None, description="mean batch time to seed a cold engine with")

    @model_validator(mode="after")
    def _check_rule(self) -> SlaiPayload:
        if self.delta_lo > self.delta_hi:
            msg = f"delta_lo ({self.delta_lo}) must not exceed delta_hi ({self.delta_hi})"
            raise ValueError(msg)
        return self


class SlaiState(ContractModel):
    """What the next SLAI decision needs from this one (the adaptive tuner's memory; ours)."""

    adaptive_delta_lo: Delta | None = Field(default=None, description="delta_lo the tuner holds; None when off")
    pending_direction: int = Field(default=0, ge=-1, le=1, description="-1 lower, +1 raise, 0 hold")
    pending_count: int = Field(default=0, ge=0, description="consecutive decisions pointing that way")
    last_move_s: Seconds | None = Field(default=None, description="event time of the tuner's last move, seconds")
    decisions: int = Field(default=0, ge=0)


class SlaiPolicy(PolicyDocument):
    """The SLAI document pushed per engine."""

    kind: Literal["slai"] = "slai"
    payload: SlaiPayload
    state: SlaiState


class SlaiTierEstimate(ContractModel):
    """Windowed TBT of one tier: P99 gap and the share of gaps within the tier's TBT."""

    tier: str = Field(min_length=1, max_length=64)
    tbt_p99_s: Seconds | None = None
    tbt_attainment_frac: Fraction | None = None
    tbt_samples: int = Field(default=0, ge=0)


class SlaiParamsOverride(ContractModel):
    """Optional overrides of SlaiParams for a what-if run; a missing field keeps the paper's default."""

    offset_mode: OffsetModeName | None = None
    delta_fixed: Delta | None = None
    delta_lo: Delta | None = None
    delta_hi: Delta | None = None
    kv_threshold_frac: float | None = Field(default=None, gt=0.0, le=1.0)
    delta_override: Delta | None = None
    tier_tbt_s: dict[str, TbtSeconds] | None = None
    default_tbt_s: TbtSeconds | None = None
    token_budget_tokens: int | None = Field(default=None, ge=1, le=65_536)
    max_active: int | None = Field(default=None, ge=1, le=65_536)
    max_decodes: int | None = Field(default=None, ge=1, le=65_536)
    prefill_order: PrefillOrderName | None = None
    valid_for_s: float | None = Field(default=None, gt=0.0, le=86_400.0)
    adaptive_enabled: bool | None = None
    adaptive_step: float | None = Field(default=None, gt=0.0, le=100.0)
    adaptive_patience: int | None = Field(default=None, ge=1, le=1000)
    adaptive_cooldown_s: float | None = Field(default=None, ge=0.0, le=86_400.0)
    ttft_target_s: float | None = Field(default=None, gt=0.0, le=3600.0)
    tbt_attainment_target_frac: float | None = Field(default=None, gt=0.0, le=1.0)
    tbt_headroom_frac: float | None = Field(default=None, gt=0.0, le=1.0)
    min_tier_samples: int | None = Field(default=None, ge=0)


class SlaiWhatIfInput(ContractModel):
    """Input file of ``governor policy slai --input FILE.json``: one engine's estimate snapshot.

    The fields are those of ``policies.slai.inputs.SlaiInputs`` (None: not yet estimated), plus the
    event time to decide at and optional parameter overrides.
    """

    engine_id: str = Field(default="what-if", min_length=1, max_length=128)
    now_s: Seconds = Field(default=0.0, description="event time of the decision, seconds")
    tbar_s: Seconds | None = Field(default=None, description="engine's cumulative mean batch time, seconds")
    step_time_p99_s: Seconds | None = Field(default=None, description="windowed P99 batch time, seconds")
    kv_use_frac: Fraction | None = Field(default=None, description="used / total KV blocks, last step")
    ttft_p50_s: Seconds | None = Field(default=None, description="windowed median TTFT, seconds")
    arrival_rate_per_s: float | None = Field(default=None, ge=0.0, le=1e6)
    batch_time_a0_s: Seconds | None = Field(default=None, description="batch-time fit intercept, seconds")
    batch_time_a_tok_s_per_token: float | None = Field(default=None, ge=0.0, le=1.0)
    tiers: list[SlaiTierEstimate] = Field(default_factory=list)
    params: SlaiParamsOverride | None = None
