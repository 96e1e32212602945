"""The policies a deployment runs by default, each from its wiring module (decide/wiring/)."""

from __future__ import annotations

from decide.registry import PolicyRegistry
from decide.wiring.admission import admission_spec
from decide.wiring.bfio import bfio_spec
from decide.wiring.ebplus import ebplus_spec
from decide.wiring.fleetopt import FLEET_SLOT_S, fleetopt_spec
from decide.wiring.slai import slai_spec
from policies.admission import AdmissionParams
from policies.bfio import BfioParams
from policies.ebplus import EbplusParams
from policies.fleetopt import FleetoptParams
from policies.slai import SlaiParams


def default_registry(
    ebplus: EbplusParams | None = None,
    admission: AdmissionParams | None = None,
    slai: SlaiParams | None = None,
    *,
    fleetopt: FleetoptParams | None = None,
    bfio: BfioParams | None = None,
    fleet_slot_s: float = FLEET_SLOT_S,
    online_cost_model: bool = False,
) -> PolicyRegistry:
    """The default policies: admission, EB+ and SLAI per engine, BF-IO per DP engine, FleetOpt per fleet.

    Args:
        ebplus: EB+ parameters (default: the paper's).
        admission: admission parameters (default: ours).
        slai: SLAI parameters (default: the paper's).
        fleetopt: FleetOpt parameters (default: the paper's).
        bfio: BF-IO parameters (default: the paper's).
        fleet_slot_s: event-time slot of the fleet-scope policies, seconds: FleetOpt decides once per
            closed slot (default 60 s, spec seed-002 section 5.4; the demo uses a shorter one). The
            stream processor and the policy service must use the same slot.
        online_cost_model: EB+ decides from each engine's online cost-model fits, whatever
            calibration the engine registered.
    """
    return PolicyRegistry(
        [
            admission_spec(admission),
            bfio_spec(bfio),
            ebplus_spec(ebplus, online_cost_model=online_cost_model),
            fleetopt_spec(fleetopt, slot_s=fleet_slot_s),
            slai_spec(slai),
        ]
    )
