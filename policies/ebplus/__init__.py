"""EB+ (seed 001, threshold-based exclusive batching): theta0, IFR correction, N*, Algorithm 1, Eq. 8, phase machine."""

from policies.ebplus.base_threshold import BaseThreshold, base_threshold, psi, solve_theta0
from policies.ebplus.calibration import CalibrationProfile, calibration_profile
from policies.ebplus.decide import decide
from policies.ebplus.ifr_correction import delta_theta
from policies.ebplus.inputs import BetaMbQuadratic, CostModel, EbplusInputs
from policies.ebplus.memory_safe_batch import NStarMethod, n_star, n_star_clt, n_star_eq6, slot_tokens_at_decode_start
from policies.ebplus.mode_selection import CrossoverSignal, ModeChoice, crossover_signal, select_mode, surge_triggered
from policies.ebplus.online_update import ThresholdUpdate, update_threshold
from policies.ebplus.params import EbplusParams, RhsThreshold
from policies.ebplus.phase_machine import (
    EngineView,
    Phase,
    PhaseAction,
    PhaseState,
    PhaseStep,
    StepKind,
    advance,
    kv_gate_fraction,
    kv_gate_passes,
    live_payload,
    runs_phases,
    step,
)
from policies.ebplus.tbt_guard import (
    TbtGuard,
    apply_tbt_guard,
    mb_step_budget_tokens,
    mixed_step_s,
    refill_stall_s,
    tbt_guard,
)

__all__ = [
    "BaseThreshold",
    "BetaMbQuadratic",
    "CalibrationProfile",
    "CostModel",
    "CrossoverSignal",
    "EbplusInputs",
    "EbplusParams",
    "EngineView",
    "ModeChoice",
    "NStarMethod",
    "Phase",
    "PhaseAction",
    "PhaseState",
    "PhaseStep",
    "RhsThreshold",
    "StepKind",
    "TbtGuard",
    "ThresholdUpdate",
    "advance",
    "apply_tbt_guard",
    "base_threshold",
    "calibration_profile",
    "crossover_signal",
    "decide",
    "delta_theta",
    "kv_gate_fraction",
    "kv_gate_passes",
    "live_payload",
    "mb_step_budget_tokens",
    "mixed_step_s",
    "n_star",
    "n_star_clt",
    "n_star_eq6",
    "psi",
    "refill_stall_s",
    "runs_phases",
    "select_mode",
    "slot_tokens_at_decode_start",
    "solve_theta0",
    "step",
    "surge_triggered",
    "tbt_guard",
    "update_threshold",
]
