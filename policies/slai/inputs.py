"""What the SLAI policy decides from: one engine's estimate snapshot (spec §4.3).

Plain numbers the estimators provide; the runtime builds ``SlaiInputs`` from the snapshot it
decides at. ``None`` means "not estimated yet", never zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from schemas.errors import InvalidInputError


@dataclass(frozen=True, slots=True, kw_only=True)
class TierObservation:
    """Windowed time-between-tokens of one tier (spec §4.3 item 3).

    Attributes:
        tier: tier name, as in the tier -> TBT map.
        tbt_p99_s: P99 token gap in the window, seconds; None without samples.
        tbt_attainment_frac: share of token gaps <= the tier's TBT; None without samples.
        tbt_samples: token gaps in the window.
    """

    tier: str
    tbt_p99_s: float | None = None
    tbt_attainment_frac: float | None = None
    tbt_samples: int = 0

    def __post_init__(self) -> None:
        _check_optional(f"tiers[{self.tier}].tbt_p99_s", self.tbt_p99_s, upper=None)
        _check_optional(f"tiers[{self.tier}].tbt_attainment_frac", self.tbt_attainment_frac, upper=1.0)
        if self.tbt_samples < 0:
            msg = f"tiers[{self.tier}].tbt_samples must be >= 0, got {self.tbt_samples}"
            raise InvalidInputError(msg, field=f"tiers[{self.tier}].tbt_samples", value=self.tbt_samples)


@dataclass(frozen=True, slots=True, kw_only=True)
class SlaiInputs:
    """One engine's estimates at a decision point.

    Attributes:
        tbar_s: the engine's cumulative mean batch time (paper's tbar), seconds.
        step_time_p99_s: windowed P99 batch time T_B,p99, seconds (safety floor, spec §3.4).
        kv_use_frac: used / total KV blocks after the last step.
        ttft_p50_s: windowed median TTFT over arrivals, censored ones included, seconds.
        arrival_rate_per_s: windowed arrival rate.
        batch_time_a0_s: intercept of the online batch-time fit, seconds.
        batch_time_a_tok_s_per_token: per-token slope of that fit, seconds per token.
        tiers: per-tier TBT observations.
    """

    tbar_s: float | None = None
    step_time_p99_s: float | None = None
    kv_use_frac: float | None = None
    ttft_p50_s: float | None = None
    arrival_rate_per_s: float | None = None
    batch_time_a0_s: float | None = None
    batch_time_a_tok_s_per_token: float | None = None
    tiers: tuple[TierObservation, ...] = ()

    def __post_init__(self) -> None:
        for name in (
            "tbar_s",
            "step_time_p99_s",
            "ttft_p50_s",
            "arrival_rate_per_s",
            "batch_time_a0_s",
            "batch_time_a_tok_s_per_token",
        ):
            _check_optional(name, getattr(self, name), upper=None)
        _check_optional("kv_use_frac", self.kv_use_frac, upper=1.0)
        names = [t.tier for t in self.tiers]
        if len(set(names)) != len(names):
            msg = f"tiers must have unique names, got {names}"
            raise InvalidInputError(msg, field="tiers", value=names)


def _check_optional(name: str, value: float | None, *, upper: float | None) -> None:
    if value is None:
        return
    if not math.isfinite(value) or value < 0 or (upper is not None and value > upper):
        bound = f"[0, {upper}]" if upper is not None else ">= 0"
        msg = f"{name} must be a finite number {bound}, got {value}"
        raise InvalidInputError(msg, field=name, value=value)
