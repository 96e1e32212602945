"""Each policy's wiring: how its inputs are read from estimate snapshots, and its registry spec."""

from decide.wiring.admission import admission_inputs, admission_spec
from decide.wiring.bfio import bfio_inputs, bfio_spec
from decide.wiring.ebplus import ebplus_inputs, ebplus_spec
from decide.wiring.fleetopt import fleetopt_inputs, fleetopt_spec
from decide.wiring.slai import slai_inputs, slai_spec

__all__ = [
    "admission_inputs",
    "admission_spec",
    "bfio_inputs",
    "bfio_spec",
    "ebplus_inputs",
    "ebplus_spec",
    "fleetopt_inputs",
    "fleetopt_spec",
    "slai_inputs",
    "slai_spec",
]
