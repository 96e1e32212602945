"""The edge's request ids and label check."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from schemas.envelope import Label
from services.gateway.inbound import RequestIds, _is_label

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
