"""SLAI policy parameters with the paper's defaults (paper §7, §7.1; specs/seed-000-slai.md §3.1, §3.4).

Every default cites where it comes from: the paper's evaluation setup (§7), its dynamic offset rule
(§7.1), or the authors' repository defaults (`default.yml`, digested in the spec's §3.1 table).
The adaptive offset tuner is ours and off by default; its knobs are marked as such.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from schemas.errors import InvalidInputError


class OffsetMode(enum.StrEnum):
    """How the engine picks delta: one fixed value, or the KV-threshold rule of paper §7.1."""

    FIXED = "fixed"
    DYNAMIC = "dynamic"


class PrefillOrder(enum.StrEnum):
    """Order of new (not yet admitted) prefills: paper §6 step 3 and App. F.2."""

    SPF = "spf"
    FCFS = "fcfs"
    SPF_PAID_FIRST = "spf_paid_first"


@dataclass(frozen=True, slots=True, kw_only=True)
class TierSlo:
    """One tier's time-between-tokens SLO, TBT_k in eq. 8."""

    tier: str
    tbt_slo_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class SlaiParams:
    """Everything the SLAI policy decides with, besides the live estimates.

    Attributes:
        offset_mode: fixed or dynamic delta (paper §7: the headline variant is dynamic).
        delta_fixed: delta of the fixed-offset variant, a multiple of tbar (dimensionless).
        delta_lo: delta below the KV threshold (favour prefills).
        delta_hi: delta at or above the KV threshold (favour decodes).
        kv_threshold_frac: KV-block use at which delta switches to delta_hi (compared with >=).
        delta_override: when set, pushed as the delta every engine uses whatever the rule says.
        tiers: the tier -> TBT_k map.
        default_tbt_s: TBT of a request whose tier is not in ``tiers``.
        token_budget_tokens: tau_budget, the most tokens per batch (a decode counts 1).
        max_active: alpha, the most requests holding KV.
        max_decodes: beta, the most decodes per batch.
        prefill_order: order of new prefills.
        valid_for_s: how long a pushed document stays valid (event-time seconds).
        tbar_seed_tolerance_frac: ours: the pushed mean batch time (``tbar_seed_s``, a cold engine's
            seed) follows the estimate only when it moves by more than this fraction of the pushed
            value, so the estimate's noise alone publishes no new document (hysteresis).
        adaptive_enabled: ours: tune delta_lo from TBT attainment and median TTFT.
        adaptive_step: ours: change of delta_lo per adaptive move.
        adaptive_patience: ours: consecutive decisions pointing the same way before a move.
        adaptive_cooldown_s: ours: least event time between two moves.
        ttft_target_s: ours: median-TTFT target the tuner lowers delta for (the paper's capacity criterion).
        tbt_attainment_target_frac: ours: fraction of token gaps within TBT_k each tier must keep (P99).
        tbt_headroom_frac: ours: delta is lowered only while every tier's P99 TBT <= this fraction of TBT_k.
        min_tier_samples: ours: token gaps a tier needs in the window before it steers the tuner.
    """

    offset_mode: OffsetMode = OffsetMode.DYNAMIC  # paper §7, SLAI (SPF, dynamic offset)
    delta_fixed: float = 10.0  # paper §7: "For SLAI (FCFS/SPF, fixed offset), we set the offset parameter to 10"
    delta_lo: float = 5.0  # paper §7.1; repo `below_memory_limit_offset: 5`
    delta_hi: float = 10.0  # paper §7.1; repo `above_memory_limit_offset: 10`
    kv_threshold_frac: float = 0.96  # paper §7.1; repo `memory_limit: 0.96` (>=)
    delta_override: float | None = None  # ours: operator override, none by default
    tiers: tuple[TierSlo, ...] = (
        TierSlo(tier="paid", tbt_slo_s=0.1),  # paper §7: paying users 0.1 s
        TierSlo(tier="free", tbt_slo_s=0.5),  # paper §7: free tier 0.5 s
    )
    default_tbt_s: float = 0.2  # repo `time_between_tokens: 0.2` (spec §3.1)
    token_budget_tokens: int = 512  # paper §7; repo `token_budget: 512`
    max_active: int = 128  # paper §7 alpha; repo `max_batch_size: 128`
    max_decodes: int = 128  # paper §7 beta; repo `limit_total_decodes: 128`
    prefill_order: PrefillOrder = PrefillOrder.SPF  # paper §7; repo `fcfs: false`, `user_priority: false`
    valid_for_s: float = 60.0  # ours: DESIGN §1 cadence "seconds"; engines fall back after this
    tbar_seed_tolerance_frac: float = 0.1  # ours: a seed within 10% of the pushed one is not news
    adaptive_enabled: bool = False  # ours, off by default (paper §8 P18 leaves P99 feedback open)
    adaptive_step: float = 1.0  # ours
    adaptive_patience: int = 2  # ours
    adaptive_cooldown_s: float = 30.0  # ours
    ttft_target_s: float = 0.5  # paper §7 capacity criterion: median TTFT <= 0.5 s
    tbt_attainment_target_frac: float = 0.99  # paper §7 metric: P99 TBT within target
    tbt_headroom_frac: float = 0.8  # ours
    min_tier_samples: int = 100  # ours

    def __post_init__(self) -> None:
        for name in ("delta_fixed", "delta_lo", "delta_hi", "default_tbt_s", "valid_for_s", "adaptive_step"):
            _require_positive(name, getattr(self, name))
        _require_positive("ttft_target_s", self.ttft_target_s)
        if self.delta_lo > self.delta_hi:
            msg = f"delta_lo must be <= delta_hi, got delta_lo={self.delta_lo}, delta_hi={self.delta_hi}"
            raise InvalidInputError(msg, field="delta_lo", value=self.delta_lo)
        for name in ("kv_threshold_frac", "tbt_attainment_target_frac", "tbt_headroom_frac"):
            value = getattr(self, name)
            if not 0.0 < value <= 1.0:
                msg = f"{name} must be in (0, 1], got {value}"
                raise InvalidInputError(msg, field=name, value=value)
        if self.delta_override is not None:
            _require_positive("delta_override", self.delta_override)
        for name in ("token_budget_tokens", "max_active", "max_decodes", "adaptive_patience"):
            if getattr(self, name) < 1:
                msg = f"{name} must be >= 1, got {getattr(self, name)}"
                raise InvalidInputError(msg, field=name, value=getattr(self, name))
        if not 0.0 <= self.tbar_seed_tolerance_frac < 1.0:
            msg = f"tbar_seed_tolerance_frac must be in [0, 1), got {self.tbar_seed_tolerance_frac}"
            raise InvalidInputError(msg, field="tbar_seed_tolerance_frac", value=self.tbar_seed_tolerance_frac)
        if self.adaptive_cooldown_s < 0 or self.min_tier_samples < 0:
            msg = "adaptive_cooldown_s and min_tier_samples must be >= 0"
            raise InvalidInputError(msg, field="adaptive_cooldown_s", value=self.adaptive_cooldown_s)
        names = [t.tier for t in self.tiers]
        if len(set(names)) != len(names) or not names:
            msg = f"tiers must be non-empty with unique names, got {names}"
            raise InvalidInputError(msg, field="tiers", value=names)
        for slo in self.tiers:
            _require_positive(f"tiers[{slo.tier}].tbt_slo_s", slo.tbt_slo_s)

    def tbt_for(self, tier: str) -> float:
        """Return TBT_k of ``tier`` in seconds, or ``default_tbt_s`` for an unknown tier (repo fallback)."""
        for slo in self.tiers:
            if slo.tier == tier:
                return slo.tbt_slo_s
        return self.default_tbt_s


def _require_positive(name: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        msg = f"{name} must be a finite number > 0, got {value}"
        raise InvalidInputError(msg, field=name, value=value)
