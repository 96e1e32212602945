"""Policy documents for the gateway's tests, built through the validating constructors and the policies' own code."""

from __future__ import annotations

import json
from pathlib import Path

from policies.bfio.decide import build_payload
from policies.bfio.params import BfioParams
from policies.fleetopt.cdf import LengthCdf
from policies.fleetopt.decide import decide as decide_fleetopt
from policies.fleetopt.inputs import FleetoptInputs
from policies.fleetopt.params import FleetoptParams
from schemas.policy_docs.admission import AdmissionLevel, AdmissionPolicy
from schemas.policy_docs.base import InputsDigest
from schemas.policy_docs.bfio import BfioPolicy, BfioState
from schemas.policy_docs.fleetopt import FleetoptPayload, FleetoptPolicy

DATA = Path(__file__).resolve().parents[3] / "services" / "sim" / "data"
NOW_S = 1000.0


def fleetopt_plan(
    *,
    b_short_tokens: int,
    gamma: float = 1.5,
    safe: tuple[str, ...] = ("prose",),
    version: int = 1,
    valid_s: float = 60.0,
) -> FleetoptPolicy:
    """A FleetOpt plan decided on the Azure CDF, with its routing knobs set to the given boundary and band."""
    raw = json.loads((DATA / "fleetopt-azure_cdf.json").read_text())
    cdf = LengthCdf(tokens=tuple(int(t) for t, _ in raw), frac=tuple(float(f) for _, f in raw))
    decision = decide_fleetopt(
        FleetoptInputs(arrival_rate_per_s=100.0, cdf=cdf), None, FleetoptParams(b_short_candidates_tokens=(4096,)), 0.0
    )
    routing = {
        "b_short_tokens": b_short_tokens,
        "gamma": gamma,
        "gamma_b_tokens": int(gamma * b_short_tokens),
        "safe_categories": list(safe),
    }
    payload = FleetoptPayload.model_validate({**decision.payload.model_dump(), "routing": routing})
    return FleetoptPolicy(
        scope="fleet",
        deployment="test",
        version=version,
        computed_at=NOW_S - 1.0,
        valid_until=NOW_S + valid_s,
        inputs=InputsDigest(snapshot_id=f"plan-{version}"),
        payload=payload,
        state=decision.state,
    )


def admission(
    engine_id: str, level: AdmissionLevel, *, admit_fraction: float = 1.0, version: int = 1, valid_s: float = 60.0
) -> AdmissionPolicy:
    """An admission document of ``engine_id`` at ``level``."""
    pressure = {"ok": 0.1, "busy": 0.7, "overloaded": 0.95}[level]
    return AdmissionPolicy(
        scope=engine_id,
        deployment="test",
        version=version,
        computed_at=NOW_S - 1.0,
        valid_until=NOW_S + valid_s,
        inputs=InputsDigest(snapshot_id="adm"),
        payload={"pressure": pressure, "level": level, "admit_fraction": admit_fraction},
        state={"smoothed_pressure": pressure, "level": level},
    )


def bfio_bundle(scope: str, *, version: int = 1, valid_s: float = 60.0) -> BfioPolicy:
    """A BF-IO bundle with the default parameters and no survival tables."""
    params = BfioParams()
    payload = build_payload(params, horizon_steps=params.horizon_steps)
    return BfioPolicy(
        scope=scope,
        deployment="test",
        version=version,
        computed_at=NOW_S - 1.0,
        valid_until=NOW_S + valid_s,
        inputs=InputsDigest(snapshot_id="bundle"),
        payload=payload,
        state=BfioState(horizon_steps=payload.horizon_steps),
    )
