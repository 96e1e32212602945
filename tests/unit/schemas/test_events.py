"""The event contract: round trips, physical bounds and clear errors for invalid events."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas.errors import InvalidInputError
from schemas.events import EVENT_TYPES, encode_event, parse_event
from schemas.requests import RequestFinished
from services.testing.models import changed
from tests.unit.schemas.event_samples import sample_events

SAMPLES = sample_events()


class TestRoundTrip:
    @pytest.mark.parametrize("event", SAMPLES, ids=lambda e: e.event_type)
    def test_model_to_json_to_model_is_identity(self, event: Any) -> None:
        assert parse_event(encode_event(event)) == event

    def test_every_event_type_has_a_sample(self) -> None:
        assert {type(e) for e in SAMPLES} == set(EVENT_TYPES)

    def test_length_finish_is_censored_and_stop_is_not(self) -> None:
        finished = next(e for e in SAMPLES if isinstance(e, RequestFinished))
        assert finished.censored
        assert not changed(finished, finish_reason="stop").censored


def _as_dict(event: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(encode_event(event))
    return data


class TestInvalidEvents:
    def test_negative_tokens_name_the_field(self) -> None:
        data = _as_dict(SAMPLES[0]) | {"prompt_tokens": -3}
        with pytest.raises(InvalidInputError, match=r"^prompt_tokens: .*greater than or equal to 0 \(line 17\)$"):
            parse_event(json.dumps(data), source="line 17")

    def test_a_record_without_a_value_is_refused_not_crashed_on(self) -> None:
        with pytest.raises(InvalidInputError, match=r"^the record holds no value \(a tombstone\) \(t@3\)$"):
            parse_event(None, source="t@3")

    def test_a_source_given_as_a_callable_is_spelled_for_a_refused_event_only(self) -> None:
        asked: list[str] = []

        def source() -> str:
            asked.append("gov.telemetry:2@41")
            return asked[-1]

        assert parse_event(encode_event(SAMPLES[0]), source=source) == SAMPLES[0]
        assert asked == []
        with pytest.raises(InvalidInputError, match=r"\(gov.telemetry:2@41\)$") as refused:
            parse_event(b"{", source=source)
        assert (refused.value.source, asked) == ("gov.telemetry:2@41", ["gov.telemetry:2@41"])

    def test_kv_used_above_total_is_refused(self) -> None:
        data = _as_dict(SAMPLES[5]) | {"kv_blocks_used": 1001}
        with pytest.raises(InvalidInputError, match=r"kv_blocks_used .* must not exceed kv_blocks_total"):
            parse_event(json.dumps(data))

    def test_batch_kind_must_match_the_batch(self) -> None:
        data = _as_dict(SAMPLES[5]) | {"batch_kind": "decode"}
        with pytest.raises(InvalidInputError, match="batch_kind is 'decode' but the batch holds a mixed batch"):
            parse_event(json.dumps(data))

    def test_rank_step_without_rank_is_refused(self) -> None:
        data = _as_dict(SAMPLES[6])
        del data["dp_rank"]
        with pytest.raises(InvalidInputError, match="needs dp_rank"):
            parse_event(json.dumps(data))

    def test_unknown_event_type_names_event_type(self) -> None:
        data = _as_dict(SAMPLES[0]) | {"event_type": "request.teleported"}
        with pytest.raises(InvalidInputError) as info:
            parse_event(json.dumps(data))
        assert info.value.field == "event_type"

    def test_oversized_event_is_refused_before_parsing(self) -> None:
        with pytest.raises(InvalidInputError, match="bytes, more than"):
            parse_event(b"{" + b" " * 70_000 + b"}")

    def test_unknown_field_is_refused(self) -> None:
        data = _as_dict(SAMPLES[0]) | {"surprise": 1}
        with pytest.raises(InvalidInputError) as info:
            parse_event(json.dumps(data))
        assert info.value.field == "surprise"

    @given(
        index=st.integers(min_value=0, max_value=len(SAMPLES) - 1),
        mutation=st.sampled_from(["drop", "wrong_type", "negative", "nan", "inf", "huge_string"]),
        pick=st.integers(min_value=0, max_value=1000),
    )
    def test_mutated_events_raise_invalid_input_never_crash(self, index: int, mutation: str, pick: int) -> None:
        data = _as_dict(SAMPLES[index])
        required = [k for k in data if k not in {"schema_version", "source_epoch", "policy_versions", "event_type"}]
        key = required[pick % len(required)]
        if mutation == "drop":
            if type(SAMPLES[index]).model_fields[key].is_required():
                del data[key]
            else:
                data[key] = {"nested": "object"}
        elif mutation == "wrong_type":
            data[key] = [1, 2] if not isinstance(data[key], list) else "text"
        elif mutation == "negative":
            data[key] = -1 if not isinstance(data[key], str) else ""
        elif mutation == "huge_string":
            data[key] = "x" * 5000 if not isinstance(data[key], bool) else "yes"
        else:
            data[key] = math.nan if mutation == "nan" else math.inf
        raw = json.dumps(data, allow_nan=True)
        try:
            event = parse_event(raw)
        except InvalidInputError as exc:
            assert exc.field is not None
            assert str(exc)
            return
        # A mutation the contract accepts must still be a physically valid event of the same type.
        assert type(event) is type(SAMPLES[index])
        assert mutation == "negative"
        assert all(
            v >= 0 for k, v in event.model_dump().items() if isinstance(v, int | float) and not isinstance(v, bool)
        )

    @given(st.binary(max_size=200))
    def test_arbitrary_bytes_raise_invalid_input(self, raw: bytes) -> None:
        with pytest.raises(InvalidInputError):
            parse_event(raw)
