"""EB+ parameters with the paper's and the reference code's defaults (specs/seed-001-ebplus.md sections 3.1, 4.3, 5.2).

Every default cites its source: "Alg. 1" is the paper's Algorithm 1 (App. D.7), "code" the reference
implementation weifang231/eb-vllm scheduler.py at commit 1fc9712 as the spec transcribes it, with the
environment variable that sets it there.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from policies.ebplus.memory_safe_batch import NStarMethod
from schemas.errors import InvalidInputError
from schemas.policy_docs.ebplus import EbplusMode


class RhsThreshold(enum.StrEnum):
    """Which threshold Eq. 8's right-hand side divides by."""

    THETA0 = "theta0"  # the paper: theta0 of Eq. 3, to keep the noisy eta out of the mode decision
    THETA_STAR = "theta_star"  # the reference code: the smoothed, clipped theta*^


@dataclass(frozen=True, slots=True, kw_only=True)
class EbplusParams:
    """Tunable EB+ parameters; policies receive them as arguments, services hold the overrides."""

    t_upd_completions: int = 100  # Alg. 1 T_upd; code VLLM_PD_IFR_UPDATE_INTERVAL = 100
    w_min_samples: int = 30  # Alg. 1 W_min; code VLLM_PD_IFR_MIN_SAMPLES = 30
    theta_default: float = 0.70  # Alg. 1 theta_default; code VLLM_PD_IFR_DEFAULT_THETA = 0.70
    theta_min: float = 0.01  # Alg. 1 clip; code VLLM_PD_THETA_FLOOR = 0.01 (non-stationary scripts: 0.7)
    theta_max: float = 0.80  # Alg. 1 clip; code VLLM_PD_THETA_MAX = 0.80
    theta_ema_alpha: float = 0.3  # code VLLM_PD_IFR_THETA_EMA_ALPHA = 0.3 (not in the paper)
    delta_theta_cap_factor: float = 5.0  # code: Delta_theta <= 5 theta0 (not in the paper)
    eps_oom: float = 0.01  # Eq. 6 eps; code VLLM_PD_OOM_TOLERANCE = 0.01, clamped to [1e-6, 0.5]
    n_star_method: NStarMethod = NStarMethod.EQ6  # paper Eq. 6; the code's CLT quadratic is the option
    auto_n: bool = True  # Alg. 1 always computes N*; code VLLM_PD_AUTO_COMPUTE_N = 1 in every paper script
    n_min_seqs: int = 1  # code clamps N* to [1, max_num_seqs]
    p0_geometric_floor: bool = True  # code `_estimate_hazard_params`: p0 >= 1/mean output, eta >= 0
    rhs_threshold: RhsThreshold = RhsThreshold.THETA0  # paper Eq. 8 (code uses theta*^, spec section 8 P7)
    delta_s_per_token: float = 1e-5  # paper App. A.4 and every code recipe (code default 1e-4)
    sticky_factor: float = 3.0  # code VLLM_PD_MODE_SWITCH_STICKY_FACTOR = 3.0
    cooldown_evaluations: int = 3  # code VLLM_PD_MODE_COOLDOWN = 3
    n_obs_min: float = 16.0  # code VLLM_PD_MODE_SWITCH_N_THRESHOLD = 16 (drain gate)
    surge_factor: float = 2.0  # code: evaluate at once when demand > 2 N_obs
    cold_start_mode: EbplusMode = EbplusMode.MB  # code VLLM_PD_AUTO_COLD_START_MODE = mb
    # Governor: a profile to assume while an engine has no cost model of its own (no known registered
    # profile, no online fits yet); its decisions then say "assumed". None (the default): EB+ probes EB
    # until the engine's exclusive steps are fitted, so no engine is governed with costs it did not declare.
    calibration_id: str | None = None
    kv_gate_s_kv: float = 0.5  # paper Eq. 23 s_KV
    kv_gate_f0: float = 0.0  # paper Eq. 23 f0
    kv_gate_f_min: float = 0.05  # paper Eq. 23 lower clip
    kv_gate_f_max: float = 0.6  # paper Eq. 23 upper clip; code VLLM_PD_KV_THRESHOLD_MAX
    tbt_guard: bool = True  # Governor (not the paper): EB only when its refill stall fits the tightest TBT SLO
    mb_step_budget: bool = True  # Governor (with tbt_guard): MB steps under a token budget that fits that SLO
    valid_for_s: float = 60.0  # Governor: about 6 T_max ticks of spec section 8 P11; engines then fall back to MB

    def __post_init__(self) -> None:
        if not 0.0 < self.theta_min <= self.theta_max < 1.0:
            msg = f"need 0 < theta_min <= theta_max < 1, got theta_min={self.theta_min}, theta_max={self.theta_max}"
            raise InvalidInputError(msg, field="theta_min", value=(self.theta_min, self.theta_max))
        checks = (
            ("t_upd_completions", self.t_upd_completions, self.t_upd_completions >= 1),
            ("w_min_samples", self.w_min_samples, self.w_min_samples >= 1),
            ("theta_default", self.theta_default, 0.0 < self.theta_default < 1.0),
            ("theta_ema_alpha", self.theta_ema_alpha, 0.0 < self.theta_ema_alpha <= 1.0),
            ("delta_theta_cap_factor", self.delta_theta_cap_factor, self.delta_theta_cap_factor >= 0.0),
            ("eps_oom", self.eps_oom, 1e-6 <= self.eps_oom <= 0.5),
            ("n_min_seqs", self.n_min_seqs, self.n_min_seqs >= 1),
            ("delta_s_per_token", self.delta_s_per_token, True),
            ("sticky_factor", self.sticky_factor, self.sticky_factor >= 1.0),
            ("cooldown_evaluations", self.cooldown_evaluations, self.cooldown_evaluations >= 0),
            ("n_obs_min", self.n_obs_min, self.n_obs_min >= 0.0),
            ("surge_factor", self.surge_factor, self.surge_factor >= 1.0),
            ("kv_gate_s_kv", self.kv_gate_s_kv, self.kv_gate_s_kv >= 0.0),
            ("kv_gate_f0", self.kv_gate_f0, 0.0 <= self.kv_gate_f0 <= 1.0),
            ("kv_gate_f_min", self.kv_gate_f_min, 0.0 <= self.kv_gate_f_min <= self.kv_gate_f_max),
            ("kv_gate_f_max", self.kv_gate_f_max, self.kv_gate_f_max <= 1.0),
            ("valid_for_s", self.valid_for_s, self.valid_for_s > 0.0),
        )
        for name, value, ok in checks:
            if not (math.isfinite(value) and ok):
                msg = f"EbplusParams.{name} out of range, got {value}"
                raise InvalidInputError(msg, field=name, value=value)
