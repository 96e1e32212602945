"""The built-in admission-pressure policy: signals, smoothing, hysteresis and bounds."""

from __future__ import annotations

import pytest

from policies.admission import AdmissionInputs, AdmissionParams, decide
from policies.admission.decide import raw_pressure
from schemas.errors import InvalidInputError
from schemas.policy_docs import AdmissionPolicy, InputsDigest

PARAMS = AdmissionParams()


def _inputs(**overrides: float) -> AdmissionInputs:
    values = {
        "num_waiting": 0.0,
        "num_running": 10.0,
        "kv_use_frac": 0.5,
        "arrival_rate_per_s": 1.0,
        "completion_rate_per_s": 1.0,
    } | overrides
    return AdmissionInputs(**values)


def _document(decision: object, version: int) -> AdmissionPolicy:
    return AdmissionPolicy(
        scope="e",
        deployment="d",
        version=version,
        computed_at=0.0,
        valid_until=1.0,
        inputs=InputsDigest(snapshot_id="s"),
        payload=decision.payload,  # type: ignore[attr-defined]
        state=decision.state,
    )  # type: ignore[attr-defined]


class TestRawPressure:
    def test_idle_engine_has_no_pressure(self) -> None:
        assert raw_pressure(_inputs(), PARAMS) == (0.0, 0.0, 0.0)

    def test_queue_as_deep_as_the_batch_is_full_queue_pressure(self) -> None:
        assert raw_pressure(_inputs(num_waiting=10.0), PARAMS)[0] == 1.0

    def test_kv_above_comfort_maps_linearly_to_one_at_full(self) -> None:
        assert raw_pressure(_inputs(kv_use_frac=0.925), PARAMS)[1] == pytest.approx(0.5)
        assert raw_pressure(_inputs(kv_use_frac=1.0), PARAMS)[1] == pytest.approx(1.0)

    def test_arrivals_above_completions_count_only_with_a_backlog(self) -> None:
        assert raw_pressure(_inputs(arrival_rate_per_s=1.25), PARAMS)[2] == 0.0
        assert raw_pressure(_inputs(arrival_rate_per_s=1.25, num_waiting=1.0), PARAMS)[2] == pytest.approx(0.5)


class TestDecide:
    def test_pressure_rises_fast_and_falls_slowly(self) -> None:
        first = decide(_inputs(num_waiting=10.0), None, PARAMS, 0.0)
        assert first.payload.pressure == 1.0
        assert first.payload.level == "overloaded"
        calm = decide(_inputs(), _document(first, 1), PARAMS, 5.0)
        assert calm.payload.pressure == pytest.approx(0.9)
        assert calm.payload.level == "overloaded"

    def test_level_leaves_busy_only_below_threshold_minus_hysteresis(self) -> None:
        busy = decide(_inputs(num_waiting=6.5), None, PARAMS, 0.0)
        assert busy.payload.level == "busy"
        slightly_lower = decide(_inputs(num_waiting=5.5), _document(busy, 1), PARAMS, 5.0)
        assert slightly_lower.payload.level == "busy"

    def test_negative_or_out_of_range_inputs_are_refused(self) -> None:
        with pytest.raises(InvalidInputError, match="num_waiting must be >= 0"):
            _inputs(num_waiting=-1.0)
        with pytest.raises(InvalidInputError, match=r"kv_use_frac must be in \[0, 1\]"):
            _inputs(kv_use_frac=1.5)
