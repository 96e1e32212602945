"""The edge's request ids, label check and the client's output-length hint."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from schemas.envelope import Label
from services.gateway.inbound import OUTPUT_HINT_HEADER, BadRequestError, RequestIds, _is_label, parse_inbound

LABEL: TypeAdapter[str] = TypeAdapter(Label)


def _pydantic_accepts(value: str) -> bool:
    try:
        LABEL.validate_python(value)
    except ValidationError:
        return False
    return True


class TestRequestIds:
    def test_a_valid_client_id_is_kept(self) -> None:
        assert RequestIds().of({"x-request-id": "chat:42/a"}) == "chat:42/a"

    def test_fresh_ids_count_up_under_one_prefix_per_process(self) -> None:
        ids = RequestIds()
        first, second = ids.of({}), ids.of({"x-request-id": "not valid"})
        prefix = first.rsplit("-", 1)[0]
        assert (first, second) == (f"{prefix}-0", f"{prefix}-1")
        assert RequestIds().of({}).rsplit("-", 1)[0] != prefix


class TestIsLabel:
    @given(st.text(alphabet=st.sampled_from("aZ09_.:/@- \n\t+é"), max_size=140))
    def test_agrees_with_the_contracts_label(self, value: str) -> None:
        assert _is_label(value) == _pydantic_accepts(value)

    def test_a_trailing_newline_is_not_a_label(self) -> None:
        assert not _is_label("abc\n")


def _parsed(hint: str | None, max_tokens: int | None = None) -> int | None:
    body = {"model": "m", "prompt": "a b"} | ({} if max_tokens is None else {"max_tokens": max_tokens})
    headers = {} if hint is None else {OUTPUT_HINT_HEADER: hint}
    return parse_inbound(json.dumps(body).encode(), "completions", headers, "r1").output_tokens_hint


class TestOutputHint:
    def test_the_clients_prediction_is_read_and_capped_at_max_tokens(self) -> None:
        assert (_parsed(None), _parsed("40"), _parsed("40", max_tokens=16), _parsed("8", max_tokens=16)) == (
            None,
            40,
            16,
            8,
        )

    @pytest.mark.parametrize("value", ["0", "-3", "2.5", "many", "", "١٢", "10000001"])
    def test_anything_but_a_positive_integer_is_refused_naming_the_header(self, value: str) -> None:
        with pytest.raises(BadRequestError) as refused:
            _parsed(value)
        assert refused.value.field == OUTPUT_HINT_HEADER
        assert refused.value.error_code == "invalid_value"
