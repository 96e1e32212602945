"""Wiring of FleetOpt (seed 002): its inputs from a fleet snapshot, and its fleet-scope spec.

The fleet snapshot (fold/fleet.py) carries the fleet-wide windowed arrival rate, the
p95 of per-minute rates, the total-length CDF merged from every engine's slot contributions, and
the input share of the tokens. The planner sizes for the p95 per-minute rate, so that one busy
minute in the window does not under-provision the fleet (spec seed-002 section 5.2).

The input share is rounded to ``INPUT_FRAC_DECIMALS`` decimals. A windowed share moves in its third decimal
from slot to slot, and every new value makes the planner rebuild its per-length table (about 3 ms
of a 4 ms sweep, ops/bench/bench_fleetopt.py); on a one-percent grid consecutive slots mostly
reuse it. One percent is well inside the estimate's own noise over a window of a few hundred
requests, and the reference planner fixes the share at 0.8 (spec seed-002 section 1.4).
"""

from __future__ import annotations

from decide.registry import PolicySpec
from decide.wiring.summary import bind_params, fleet_summary
from fold.triggers import EverySeconds
from policies.fleetopt import FleetoptInputs, FleetoptParams, LengthCdf
from policies.fleetopt import decide as decide_fleetopt
from schemas.policy_docs import FleetoptPolicy
from schemas.records import EstimateSnapshot

FLEET_SLOT_S = 60.0  # seed-002 section 5.4: replan about every minute, on 1-min slots
MIN_FINISHED = 50
INPUT_FRAC_RANGE = (0.5, 0.99)
INPUT_FRAC_DECIMALS = 2


def fleetopt_inputs(snapshot: EstimateSnapshot) -> FleetoptInputs | None:
    """FleetOpt inputs from a fleet snapshot; None until the window holds enough finished requests."""
    s = fleet_summary(snapshot)
    rate_per_min = s.arrival_rate_p95_per_min
    points = s.length_cdf
    if rate_per_min is None or rate_per_min <= 0.0 or s.finished < MIN_FINISHED:
        return None
    if not points:
        return None
    tokens = tuple(p.length_tokens for p in points)
    frac = tuple(p.cdf_frac for p in points)
    lo, hi = INPUT_FRAC_RANGE
    share = 0.8 if s.input_frac is None else min(hi, max(lo, round(s.input_frac, INPUT_FRAC_DECIMALS)))
    return FleetoptInputs(
        arrival_rate_per_s=rate_per_min / 60.0, cdf=LengthCdf(tokens=tokens, frac=frac), input_frac=share
    )


def fleetopt_spec(params: FleetoptParams | None = None, slot_s: float = FLEET_SLOT_S) -> PolicySpec:
    """FleetOpt for the whole deployment, on every closed fleet slot of ``slot_s`` event-time seconds."""
    return PolicySpec(
        kind="fleetopt",
        scope="fleet",
        trigger=EverySeconds(seconds=slot_s),
        document_type=FleetoptPolicy,
        inputs_from_snapshot=fleetopt_inputs,
        decide=bind_params(decide_fleetopt, params or FleetoptParams()),
    )
