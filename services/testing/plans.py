"""FleetOpt plans for the scaler's tests: one real planner decision, with the pool sizes each test needs."""

from __future__ import annotations

import functools
import json
from pathlib import Path

from policies.fleetopt.cdf import LengthCdf
from policies.fleetopt.decide import decide as decide_fleetopt
from policies.fleetopt.inputs import FleetoptInputs
from policies.fleetopt.params import FleetoptParams
from schemas.policy_docs.base import InputsDigest
from schemas.policy_docs.fleetopt import FleetoptPayload, FleetoptPolicy, FleetoptState

DATA = Path(__file__).resolve().parents[1] / "sim" / "data"


@functools.cache
def _decided() -> tuple[FleetoptPayload, FleetoptState]:
    raw = json.loads((DATA / "fleetopt-azure_cdf.json").read_text())
    cdf = LengthCdf(tokens=tuple(int(t) for t, _ in raw), frac=tuple(float(f) for _, f in raw))
    decision = decide_fleetopt(FleetoptInputs(arrival_rate_per_s=100.0, cdf=cdf), None, FleetoptParams(), 0.0)
    return decision.payload, decision.state


def fleetopt_plan(
    *, short_gpus: int, long_gpus: int, version: int, computed_at: float, valid_s: float = 600.0
) -> FleetoptPolicy:
    """The planner's plan with its pools resized to ``short_gpus`` and ``long_gpus``, decided at ``computed_at``."""
    payload, state = _decided()
    fleet = payload.fleet.model_dump()
    fleet["short"]["n_gpus"] = short_gpus
    fleet["long"]["n_gpus"] = long_gpus
    return FleetoptPolicy(
        scope="fleet",
        deployment="test",
        version=version,
        computed_at=computed_at,
        valid_until=computed_at + valid_s,
        inputs=InputsDigest(snapshot_id=f"plan-{version}"),
        payload=FleetoptPayload.model_validate({**payload.model_dump(), "fleet": fleet}),
        state=state,
    )
