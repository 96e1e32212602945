"""The estimate summaries an ``EstimateSnapshot`` carries on ``gov.estimates``: typed, versioned, with units.

Five summaries travel in snapshots, told apart by ``summary_type``:

- ``EngineSummary``: one engine's estimates (fold/engine_estimates.py), what the engine-scope
  policies decide from (decide/wiring/);
- ``FleetJoin``: an engine's first fleet slot, sent when its first event is folded, so the fleet
  waits for the engine from then on rather than from its first closed slot;
- ``FleetContribution``: one engine's counts over one closed fleet slot (fold/fleet.py);
- ``FleetSummary``: the fleet-wide estimates over the last closed slots, what FleetOpt decides from;
- ``FleetSilence``: the policy service's declaration that an overdue engine is silent, written to the
  fleet partition so that every reader applies it at the same point of the fleet's log.

Each carries its wire ``format``; a summary of another format (the untyped summaries before format 2
carried none) is refused with one line that says so, so that an old record on the topic fails
clearly instead of switching a policy off. Every field name carries its unit (``_s``, ``_tokens``,
``_per_s``, ``_frac``); names without a unit suffix are counts. ``None`` marks "not enough data".
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from schemas.engines import EngineRegistered
from schemas.envelope import EngineId
from schemas.policy_docs.base import ContractModel

ENGINE_SUMMARY_FORMAT: Literal[2] = 2  # 1: the untyped JSON summary (no ``format`` field)
FLEET_CONTRIBUTION_FORMAT: Literal[2] = 2
FLEET_SUMMARY_FORMAT: Literal[2] = 2
FLEET_SILENCE_FORMAT: Literal[1] = 1
FLEET_JOIN_FORMAT: Literal[1] = 1
SUMMARY_FORMATS = {
    "engine": ENGINE_SUMMARY_FORMAT,
    "fleet_contribution": FLEET_CONTRIBUTION_FORMAT,
    "fleet": FLEET_SUMMARY_FORMAT,
    "fleet_silence": FLEET_SILENCE_FORMAT,
    "fleet_join": FLEET_JOIN_FORMAT,
}


class EngineRegistration(ContractModel):
    """What the engine registered, with ``EngineRegistered``'s field names (vLLM's for the limits)."""

    model: str
    gpu: str
    hardware_profile: str | None = None
    pool: str = "default"
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int = Field(description="tokens")
    kv_blocks_total: int
    block_size_tokens: int
    dp_size: int = Field(default=1, description="data-parallel ranks")
    scheduler: str | None = None
    obeys: list[str] | None = None
    dp_group: str | None = Field(
        default=None, description="the DP deployment of separate servers this engine is a rank of (BF-IO's scope)"
    )

    @classmethod
    def of(cls, event: EngineRegistered) -> EngineRegistration:
        """The registration an ``engine.registered`` event declares: its fields the policies read, by the same names."""
        return cls.model_validate(event.model_dump(include=set(cls.model_fields)))


class LastStep(ContractModel):
    """Queue and KV state after the engine's last step."""

    running_requests: int
    waiting_requests: int
    kv_use_frac: float
    kv_capacity_tokens: int


class DurationQuantiles(ContractModel):
    """Count, mean and quantiles of a windowed sketch of durations, seconds."""

    count: int
    mean_s: float
    p50_s: float
    p90_s: float
    p99_s: float


class HazardFit(ContractModel):
    """The censoring-aware linear hazard h(t) = p0 + eta t of output length (seed 001 section 3.4, App. E)."""

    p0_per_token: float
    eta_per_token2: float
    n_samples: int
    n_censored: int
    t_start_tokens: int
    t95_tokens: int


class LinearCostFit(ContractModel):
    """Batch time T = alpha + beta n of one batch kind; n is tokens (prefill, mixed) or sequences (decode)."""

    alpha_s: float
    beta_s_per_unit: float
    n_samples: int
    residual_std_s: float


class MixedBatchFit(ContractModel):
    """Mixed steps: T = alpha_MB + beta_MB(r) n_tok with beta_MB(r) = c0 + c1 r + c2 r^2 (seed-001 App. A.4)."""

    alpha_mb_s: float
    c0_s_per_token: float
    c1_s_per_token: float
    c2_s_per_token: float
    n_samples: int


class CostFits(ContractModel):
    """The batch cost model fitted from the engine's steps, per batch kind, and beta_MB(r)."""

    prefill: LinearCostFit | None
    decode: LinearCostFit | None
    mixed: LinearCostFit | None
    beta_mb: MixedBatchFit | None


class TierSummary(ContractModel):
    """One SLO tier's latencies: TTFT, per-request P99 token gap, and the gaps within the tier's TBT SLO."""

    tbt_slo_s: float | None
    ttft_s: DurationQuantiles | None
    tbt_p99_s: DurationQuantiles | None
    tbt_gaps: int
    tbt_gaps_over_slo: int


class SurvivalSummary(ContractModel):
    """Kaplan-Meier survival of output length at log-spaced bin edges (seed-003 section 6.4)."""

    bin_edges_tokens: list[float]
    survival_frac: list[float]
    n_samples: int
    n_censored: int


class StepModelFit(ContractModel):
    """BF-IO's step model T = C + t_l max_g L_g (seed-003 Eq. 6)."""

    c_s: float
    t_l_s_per_token: float
    n_samples: int


class SelfCheckSummary(ContractModel):
    """BF-IO's online self-check over the window: both decisions' realised imbalance.

    Sums of the engine's ``bfio.self_check`` reports whose event time falls in the last ``window_s``
    (docs/policies/bfio.md, "Online self-check").
    """

    window_s: float
    judged_steps: int
    differing_steps: int
    expired_steps: int
    myopic_imbalance_tokens: float = Field(description="summed realised imbalance of H = 0's decisions")
    lookahead_imbalance_tokens: float = Field(description="summed realised imbalance of the lookahead's decisions")
    squared_difference_tokens2: float = Field(description="summed squared per-step difference of the two")
    shadow_compute_s: float
    lookahead_horizon_steps: int = Field(description="the lookahead H of the last report")
    lookahead_in_force: bool = Field(description="the side the engine applied at the last report")


class DpSummary(ContractModel):
    """Rank loads of a data-parallel engine: imbalance, idle share, the last step's loads and the step model."""

    n_steps: int
    avg_imbalance_tokens: float | None
    avg_idle_load_frac: float | None
    loads_tokens: list[float]
    step_model: StepModelFit | None
    self_check: SelfCheckSummary | None = None


class EngineSummary(ContractModel):
    """One engine's estimates at a snapshot position: everything an engine-scope policy decides from."""

    summary_type: Literal["engine"] = "engine"
    format: Literal[2] = ENGINE_SUMMARY_FORMAT
    engine_id: str
    engine: EngineRegistration | None
    ts_s: float | None
    events_folded: int
    completions_total: int
    arrival_rate_per_s: float
    arrival_rate_short_per_s: float
    completion_rate_per_s: float
    completion_rate_short_per_s: float
    mu_l_tokens: float | None
    mu_o_tokens: float | None
    n_obs_requests: float | None
    last_step: LastStep | None
    tbar_s: float | None
    step_time_s: DurationQuantiles | None
    hazard: HazardFit | None
    output_samples: int
    in_flight_censored: int
    cost: CostFits
    tiers: dict[str, TierSummary]
    survival: SurvivalSummary | None
    dp: DpSummary | None
    duplicate_events: int = Field(default=0, description="events skipped as duplicates of a folded event_id")
    seq_gaps: int = Field(default=0, description="times the engine's seq jumped past the next number")
    seq_missing_events: int = Field(default=0, description="seq numbers skipped in those gaps")
    restarts: int = Field(default=0, description="new producer generations (source_epoch) of the engine")


class FleetContribution(ContractModel):
    """One engine's counts over one closed fleet slot (fold/fleet.py)."""

    summary_type: Literal["fleet_contribution"] = "fleet_contribution"
    format: Literal[2] = FLEET_CONTRIBUTION_FORMAT
    slot_index: int
    arrivals: int
    finished: int
    prompt_tokens: int
    output_tokens: int
    length_counts: dict[str, int] = Field(description="finished requests per total-length bucket index")


class LengthCdfPoint(ContractModel):
    """F(total length <= length_tokens) = cdf_frac."""

    length_tokens: int
    cdf_frac: float


class FleetSummary(ContractModel):
    """The fleet's estimates over the last closed slots: what FleetOpt decides from (seed-002 section 5)."""

    summary_type: Literal["fleet"] = "fleet"
    format: Literal[2] = FLEET_SUMMARY_FORMAT
    engines: list[str]
    slots: int
    covered_s: float
    arrival_rate_per_s: float | None
    arrival_rate_p95_per_min: float | None
    finished: int
    input_frac: float | None
    length_cdf: list[LengthCdfPoint] | None
    late_contributions: int
    duplicate_contributions: int = Field(default=0, description="contributions for an (engine, slot) already merged")
    silent_engines: list[str] = Field(
        default_factory=list,
        description="engines dropped from the fleet: their last closed slot trails the newest by over silent_slots",
    )
    quarantined_engines: list[str] = Field(
        default_factory=list,
        description="engines whose clock leads the fleet's by over the allowed lead: not trusted, not merged",
    )
    quarantined_contributions: int = Field(default=0, ge=0, description="contributions of quarantined engines dropped")


class FleetJoin(ContractModel):
    """An engine's first fleet slot (fold/fleet.py): the fleet holds that slot for it from here on."""

    summary_type: Literal["fleet_join"] = "fleet_join"
    format: Literal[1] = FLEET_JOIN_FORMAT
    slot_index: int = Field(description="the fleet slot of the engine's first event")


class FleetSilence(ContractModel):
    """An overdue engine declared silent by the fleet's owner after waiting ``waited_s`` (fold/fleet.py).

    Applied only while the engine's last closed slot is still ``engine_slot``: a declaration that
    reaches the log after the engine has spoken again changes nothing.
    """

    summary_type: Literal["fleet_silence"] = "fleet_silence"
    format: Literal[1] = FLEET_SILENCE_FORMAT
    engine: EngineId
    engine_slot: int = Field(description="the engine's last closed slot when it was declared silent")
    fleet_slot: int = Field(description="the newest engine's last closed slot at the declaration")
    waited_s: float = Field(ge=0.0, description="wall-clock seconds the fleet waited on the engine")


EstimateSummary = Annotated[
    EngineSummary | FleetJoin | FleetContribution | FleetSummary | FleetSilence, Field(discriminator="summary_type")
]


def check_summary_format(data: object) -> None:
    """Refuse, in one line, a summary of a type or format this release does not read.

    Raises:
        ValueError: an untyped summary (format 1, before ``summary_type``), an unknown type, or
            another format of a known type.
    """
    if not isinstance(data, dict):
        return
    summary_type = data.get("summary_type")
    if summary_type is None:
        msg = (
            "estimate summary of format 1 (untyped, no summary_type) is not read by this release: re-fold the telemetry"
        )
        raise ValueError(msg)
    expected = SUMMARY_FORMATS.get(summary_type) if isinstance(summary_type, str) else None
    if expected is None:
        msg = f"estimate summary of unknown type {summary_type!r} (known: {sorted(SUMMARY_FORMATS)})"
        raise ValueError(msg)
    found = data.get("format")
    if found != expected:
        msg = f"{summary_type} estimate summary of format {found!r} is not read by this release (it reads {expected})"
        raise ValueError(msg)
