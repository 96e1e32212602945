"""Fleet cost of a two-pool plan (Eq. 9) and its annualisation (seed 002 Table 3)."""

from __future__ import annotations

from policies.fleetopt.params import FleetoptParams


def fleet_cost_usd_per_hr(n_short_gpus: int, n_long_gpus: int, params: FleetoptParams) -> float:
    """Cost(n_s, n_l) = c_s n_s + c_l n_l in $/h (Eq. 9), summed in the reference's order for its tie-breaks."""
    return n_short_gpus * params.short_cost_usd_per_hr + n_long_gpus * params.long_cost_usd_per_hr


def annual_cost_kusd(cost_usd_per_hr: float, params: FleetoptParams) -> float:
    """Annual cost in thousands of dollars: $/h * hours per year / 1000 (Table 3's "Ann. K$")."""
    return cost_usd_per_hr * params.hours_per_year / 1000.0


def savings_frac(total_gpus: int, homogeneous_gpus: int) -> float:
    """GPU savings against the homogeneous fleet, (homo - total) / homo (Table 3's "Savings", phi = 1)."""
    return (homogeneous_gpus - total_gpus) / homogeneous_gpus
