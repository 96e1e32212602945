"""decide(): the plan document of spec section 5.3 with the hysteresis of section 5.4."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np

from policies.fleetopt.cdf import LengthCdf
from policies.fleetopt.decide import decide
from policies.fleetopt.inputs import FleetoptInputs
from policies.fleetopt.params import FleetoptParams
from schemas.policy_docs.base import InputsDigest
from schemas.policy_docs.fleetopt import FleetoptPolicy

DATA = Path(__file__).resolve().parents[4] / "services" / "sim" / "data"
RAW = json.loads((DATA / "fleetopt-azure_cdf.json").read_text())
AZURE = LengthCdf(tokens=tuple(int(t) for t, _ in RAW), frac=tuple(float(f) for _, f in RAW))
PARAMS = FleetoptParams(b_short_candidates_tokens=(4096,))


def _publish(inputs: FleetoptInputs, previous: FleetoptPolicy | None, now_s: float) -> FleetoptPolicy:
    """What the runtime does: wrap the decision in a versioned document."""
    decision = decide(inputs, previous, PARAMS, now_s)
    version = 1 if previous is None else previous.version + 1
    return FleetoptPolicy(
        scope="fleet",
        deployment="test",
        version=version,
        computed_at=now_s,
        valid_until=now_s + decision.valid_for_s,
        inputs=InputsDigest(snapshot_id=f"s{version}"),
        payload=decision.payload,
        state=decision.state,
        previous_version=None if previous is None else previous.version,
    )


class TestDecide:
    def test_first_decision_pushes_the_plan(self) -> None:
        decision = decide(FleetoptInputs(arrival_rate_per_s=1000.0, cdf=AZURE), None, PARAMS, 0.0)
        payload = decision.payload
        assert payload.routing.b_short_tokens == 4096
        assert payload.routing.gamma_b_tokens == int(payload.routing.gamma * 4096)
        assert payload.fleet.short.n_gpus == decision.diagnostics["planned_short_gpus"]
        assert payload.fleet.long.c_max_tokens == 65536
        assert payload.fleet.short.n_max_slots == 256
        assert payload.slo_met
        assert 0.0 < payload.predictions.short.util_frac <= PARAMS.rho_max
        assert decision.clamps == ()

    def test_step_change_in_load_scales_up_once_at_once(self) -> None:
        previous = None
        totals = []
        for k in range(8):
            lam = 1000.0 if k < 4 else 1500.0
            previous = _publish(FleetoptInputs(arrival_rate_per_s=lam, cdf=AZURE), previous, 60.0 * k)
            totals.append(previous.payload.fleet.short.n_gpus + previous.payload.fleet.long.n_gpus)
        assert len(set(totals[:4])) == 1
        assert len(set(totals[4:])) == 1
        assert totals[4] > totals[3]

    def test_noisy_stationary_load_does_not_flap_pool_sizes(self) -> None:
        rng = np.random.default_rng(3)
        previous = None
        sizes = []
        for k in range(40):
            lam = 1000.0 * (1.0 + rng.uniform(-0.03, 0.03))
            previous = _publish(FleetoptInputs(arrival_rate_per_s=lam, cdf=AZURE), previous, 60.0 * k)
            sizes.append((previous.payload.fleet.short.n_gpus, previous.payload.fleet.long.n_gpus))
        for pool in (0, 1):
            series = [s[pool] for s in sizes]
            assert all(b >= a for a, b in itertools.pairwise(series))

    def test_scale_down_waits_for_the_dwell(self) -> None:
        previous = _publish(FleetoptInputs(arrival_rate_per_s=1500.0, cdf=AZURE), None, 0.0)
        high = previous.payload.fleet.short.n_gpus
        shorts = []
        for k in range(1, 20):
            previous = _publish(FleetoptInputs(arrival_rate_per_s=1000.0, cdf=AZURE), previous, 60.0 * k)
            shorts.append(previous.payload.fleet.short.n_gpus)
        # The drop is first wanted at t = 60 s; the dwell of 900 s passes at t = 960 s (run 16).
        assert shorts[:15] == [high] * 15
        assert shorts[15] < high

    def test_b_short_is_held_for_its_dwell(self) -> None:
        inputs = FleetoptInputs(arrival_rate_per_s=1000.0, cdf=AZURE)
        first = _publish(inputs, None, 0.0)
        free = FleetoptParams()  # a full sweep would move B_short away from 4096 (spec section 2.4: B = 4096 wins)
        decision = decide(inputs, first, FleetoptParams(b_short_candidates_tokens=(2048, 4096, 6144)), 60.0)
        assert decision.payload.routing.b_short_tokens == 4096
        assert decide(inputs, first, free, free.b_short_dwell_s + 1.0).state.b_short_tokens == int(
            decide(inputs, None, free, 0.0).payload.routing.b_short_tokens
        )
