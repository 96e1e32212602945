"""BF-IO (Balance-Future with Integer Optimization): DP-rank assignment; specs/seed-003-bfio.md.

The solver and router run in the engine (``BfioRouter``); the control plane decides the bundle
(``decide``) and, in central-pool mode, per-request assignments (``decide_assignments``).
"""

from policies.bfio.baselines import (
    fcfs_index_fill,
    fcfs_most_free,
    jsq_count,
    jsq_load,
    power_of_d,
    round_robin,
    vllm_dp_score,
)
from policies.bfio.central_pool import AssignmentPlan, decide_assignments
from policies.bfio.decide import build_payload, decide
from policies.bfio.exact import solve_exact
from policies.bfio.greedy import FastSolution, SolveBudget, solve_fast
from policies.bfio.horizon import HorizonGrid, build_horizon_grid
from policies.bfio.inputs import BfioInputs, SurvivalTable
from policies.bfio.lookahead import (
    ClassPredictor,
    SurvivalCurve,
    active_contributions,
    conditional_survival,
    new_request_contributions,
    rank_base_loads,
    rank_base_loads_by_offset,
)
from policies.bfio.objective import imbalance_tokens, is_feasible, loads_after, marginal_scores, objective_j
from policies.bfio.params import BfioMode, BfioParams, NewRequestModel, WeightScheme
from policies.bfio.router import ActiveBatch, BfioRouter, Routing, WaitingBatch
from policies.bfio.selfcheck import SelfCheckVerdict, SelfCheckWindow, choose_horizon, paired_z, realised_objective

__all__ = [
    "ActiveBatch",
    "AssignmentPlan",
    "BfioInputs",
    "BfioMode",
    "BfioParams",
    "BfioRouter",
    "ClassPredictor",
    "FastSolution",
    "HorizonGrid",
    "NewRequestModel",
    "Routing",
    "SelfCheckVerdict",
    "SelfCheckWindow",
    "SolveBudget",
    "SurvivalCurve",
    "SurvivalTable",
    "WaitingBatch",
    "WeightScheme",
    "active_contributions",
    "build_horizon_grid",
    "build_payload",
    "choose_horizon",
    "conditional_survival",
    "decide",
    "decide_assignments",
    "fcfs_index_fill",
    "fcfs_most_free",
    "imbalance_tokens",
    "is_feasible",
    "jsq_count",
    "jsq_load",
    "loads_after",
    "marginal_scores",
    "new_request_contributions",
    "objective_j",
    "paired_z",
    "power_of_d",
    "rank_base_loads",
    "rank_base_loads_by_offset",
    "realised_objective",
    "round_robin",
    "solve_exact",
    "solve_fast",
    "vllm_dp_score",
]
