"""FleetOpt planner parameters with the paper's defaults (seed 002 sections 6-7.1; spec sections 3.1-3.2).

The GPU profile is the paper's only one: Llama-3-70B fp16 on an 8-GPU A100-80GB tensor-parallel
replica, priced and counted as one "GPU" (spec pitfall 17). Fields the paper leaves unstated come
from the reference code as spec section 2.3 records them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from schemas.errors import InvalidInputError


class PlannerMode(StrEnum):
    """How the planner calibrates and sizes the pools.

    ``paper`` mirrors the reference code bit for bit (Monte Carlo calibration with
    ``random.Random(42)``, the +1 lower bound, the 5000-GPU search cap, W99 <= T_slo, the short pool
    calibrated on native requests only), so Tables 3 and 6 reproduce exactly. ``exact`` integrates the
    same length law in closed form, calibrates the short pool on the post-compression mixture and the
    long pool on every request it receives (spec section 2.7), and sizes with the paper's Eq. 8.
    """

    PAPER = "paper"
    EXACT = "exact"


#: The gamma grid of Algorithm 1 line 4: {1.0, 1.1, ..., 2.0}, built as the reference does.
PAPER_GAMMAS: tuple[float, ...] = tuple(round(1.0 + 0.1 * k, 1) for k in range(11))
#: Categories whose prompts may be compressed (seed 002 section 5.2): code is excluded.
PAPER_SAFE_CATEGORIES: tuple[str, ...] = ("mixed", "prose", "rag")


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetoptParams:
    """Everything the planner and its hysteresis need besides the workload estimates.

    Raises:
        InvalidInputError: when a field is out of its physical range.
    """

    mode: PlannerMode = PlannerMode.EXACT  # ours: exact is the default; paper reproduces the tables
    t_slo_s: float = 0.5  # seed 002 section 7.1: P99 TTFT target 500 ms
    rho_max: float = 0.85  # seed 002 Eq. 11: utilisation cap
    gammas: tuple[float, ...] = PAPER_GAMMAS  # seed 002 Algorithm 1 line 4
    b_short_candidates_tokens: tuple[int, ...] = ()  # empty: CDF breakpoints, spec section 2.4 (reference filter)
    max_short_ctx_tokens: int = 65536  # largest B_short the short-pool engines accept (spec section 2.4 DESIGN)
    safe_categories: tuple[str, ...] = PAPER_SAFE_CATEGORIES  # seed 002 section 5.2
    # GPU profile (one profile unit = one 8-GPU TP replica), spec section 3.1.
    w_s: float = 0.008  # seed 002 section 7.1: base iteration latency W = 8 ms
    h_s_per_slot: float = 0.00065  # seed 002 section 7.1: H = 0.65 ms/slot, applied at calib_ctx_tokens (reference)
    chunk_tokens: int = 512  # seed 002 section 7.1: chunked-prefill C_chunk
    calib_slots: int = 128  # seed 002 section 6: n_max^calib
    calib_ctx_tokens: int = 8192  # seed 002 section 6: C_calib
    kv_blocks: int = 65536  # reference gpu_profiles (A100_80GB), spec section 1.3
    kv_block_tokens: int = 16  # reference gpu_profiles (A100_80GB), spec section 1.3
    long_ctx_tokens: int = 65536  # seed 002 section 7.1: C_max^(l)
    short_cost_usd_per_hr: float = 2.21  # seed 002 Table 3
    long_cost_usd_per_hr: float = 2.21  # seed 002 Table 3 (phi = 1)
    hours_per_year: float = 8760.0  # seed 002 Table 3
    # Calibration and sizing details the paper leaves unstated (spec section 2.3).
    mc_samples: int = 3000  # reference calibrate(): 3000 draws (paper mode only)
    mc_seed: int = 42  # reference calibrate(): random.Random(42) (paper mode only)
    min_pool_rate_per_s: float = 0.01  # reference: the long pool is dropped when lambda_l <= 0.01 req/s
    max_search_gpus: int = 5000  # reference min_gpus cap (paper mode only)
    # Hysteresis and actuation, spec section 5.4.
    deadband_frac: float = 0.02  # spec 5.4: change n only if |delta| >= max(1, 2%)
    scale_down_runs: int = 2  # spec 5.4: ... persisting for 2 consecutive runs
    scale_down_dwell_s: float = 900.0  # spec 5.4: scale down only after a dwell (15 min)
    b_short_dwell_s: float = 10800.0  # spec 5.4: B_short / n_max^(s) change at most every few hours (3 h)
    valid_for_s: float = 300.0  # DESIGN section 1: the fleet plan is refreshed about every minute; 5 runs of slack

    def __post_init__(self) -> None:
        positive = {
            "t_slo_s": self.t_slo_s,
            "w_s": self.w_s,
            "h_s_per_slot": self.h_s_per_slot,
            "short_cost_usd_per_hr": self.short_cost_usd_per_hr,
            "long_cost_usd_per_hr": self.long_cost_usd_per_hr,
            "hours_per_year": self.hours_per_year,
            "valid_for_s": self.valid_for_s,
        }
        for name, value in positive.items():
            if not (math.isfinite(value) and value > 0.0):
                msg = f"{name} must be finite and > 0, got {value}"
                raise InvalidInputError(msg, field=name, value=value)
        if not 0.0 < self.rho_max < 1.0:
            msg = f"rho_max must lie in (0, 1), got {self.rho_max}"
            raise InvalidInputError(msg, field="rho_max", value=self.rho_max)
        if not self.gammas or any(not 1.0 <= g <= 4.0 for g in self.gammas):
            msg = f"gammas must be a non-empty tuple of values in [1, 4], got {self.gammas}"
            raise InvalidInputError(msg, field="gammas", value=self.gammas)
        ints = {
            "chunk_tokens": self.chunk_tokens,
            "calib_slots": self.calib_slots,
            "calib_ctx_tokens": self.calib_ctx_tokens,
            "kv_blocks": self.kv_blocks,
            "kv_block_tokens": self.kv_block_tokens,
            "long_ctx_tokens": self.long_ctx_tokens,
            "max_short_ctx_tokens": self.max_short_ctx_tokens,
            "mc_samples": self.mc_samples,
            "max_search_gpus": self.max_search_gpus,
            "scale_down_runs": self.scale_down_runs,
        }
        for name, count in ints.items():
            if count < 1:
                msg = f"{name} must be >= 1, got {count}"
                raise InvalidInputError(msg, field=name, value=count)
        if any(b < 1 for b in self.b_short_candidates_tokens):
            msg = f"b_short_candidates_tokens must all be >= 1, got {self.b_short_candidates_tokens}"
            raise InvalidInputError(msg, field="b_short_candidates_tokens", value=self.b_short_candidates_tokens)
        non_negative = {
            "min_pool_rate_per_s": self.min_pool_rate_per_s,
            "deadband_frac": self.deadband_frac,
            "scale_down_dwell_s": self.scale_down_dwell_s,
            "b_short_dwell_s": self.b_short_dwell_s,
        }
        for name, value in non_negative.items():
            if not (math.isfinite(value) and value >= 0.0):
                msg = f"{name} must be finite and >= 0, got {value}"
                raise InvalidInputError(msg, field=name, value=value)
