"""The policies a deployment runs by default, each from its wiring module (services/policy/wiring/)."""

from __future__ import annotations

from policies.admission import AdmissionParams
from policies.ebplus import EbplusParams
from policies.slai import SlaiParams
from services.policy.registry import PolicyRegistry
from services.policy.wiring.admission import admission_spec
from services.policy.wiring.bfio import bfio_spec
from services.policy.wiring.ebplus import ebplus_spec
from services.policy.wiring.fleetopt import fleetopt_spec
from services.policy.wiring.slai import slai_spec


def default_registry(
    ebplus: EbplusParams | None = None, admission: AdmissionParams | None = None, slai: SlaiParams | None = None
) -> PolicyRegistry:
    """The default policies: admission, EB+ and SLAI per engine, BF-IO per DP engine, FleetOpt per fleet."""
    return PolicyRegistry(
        [admission_spec(admission), bfio_spec(), ebplus_spec(ebplus), fleetopt_spec(), slai_spec(slai)]
    )
