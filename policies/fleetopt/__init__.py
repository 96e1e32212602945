"""FleetOpt (seed 002): the two-pool fleet planner with Compress-and-Route, and its actuation hysteresis."""

from policies.fleetopt.calibration import ExactCalibrator, PoolCalibration, calibrate_paper, slots_per_gpu
from policies.fleetopt.cdf import LengthCdf
from policies.fleetopt.compression import RoutingSplit, gamma_b_tokens, split_traffic
from policies.fleetopt.cost import annual_cost_kusd, fleet_cost_usd_per_hr, savings_frac
from policies.fleetopt.decide import decide
from policies.fleetopt.erlang import erlang_c, p99_wait_s
from policies.fleetopt.hysteresis import BoundaryHold, PoolHold, hold_boundary, hold_pool
from policies.fleetopt.inputs import FleetoptInputs
from policies.fleetopt.params import FleetoptParams, PlannerMode
from policies.fleetopt.sizing import PoolSizing, evaluate_pool, min_gpus, size_pool
from policies.fleetopt.sweep import FleetPlan, PlanPoint, cheapest, homogeneous_fleet, plan_fleet, sweep

__all__ = [
    "BoundaryHold",
    "ExactCalibrator",
    "FleetPlan",
    "FleetoptInputs",
    "FleetoptParams",
    "LengthCdf",
    "PlanPoint",
    "PlannerMode",
    "PoolCalibration",
    "PoolHold",
    "PoolSizing",
    "RoutingSplit",
    "annual_cost_kusd",
    "calibrate_paper",
    "cheapest",
    "decide",
    "erlang_c",
    "evaluate_pool",
    "fleet_cost_usd_per_hr",
    "gamma_b_tokens",
    "hold_boundary",
    "hold_pool",
    "homogeneous_fleet",
    "min_gpus",
    "p99_wait_s",
    "plan_fleet",
    "savings_frac",
    "size_pool",
    "slots_per_gpu",
    "split_traffic",
    "sweep",
]
