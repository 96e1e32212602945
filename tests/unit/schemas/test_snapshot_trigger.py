"""A snapshot's trigger, typed in Python and ``kind:cause`` on the wire (schemas/snapshot_trigger.py)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from schemas.snapshot_trigger import MAX_TRIGGER_CHARS, SnapshotTrigger, TriggerField

TRIGGER: TypeAdapter[SnapshotTrigger] = TypeAdapter(TriggerField)


class TestSnapshotTrigger:
    def test_the_wire_form_is_kind_colon_cause(self) -> None:
        trigger = SnapshotTrigger(kind="ebplus", cause="every 40 request.finished")
        assert str(trigger) == "ebplus:every 40 request.finished"

    def test_the_kind_ends_at_the_first_colon(self) -> None:
        expected = SnapshotTrigger(kind="fleetopt", cause="fleet slot 3:x")
        assert expected == SnapshotTrigger.parse("fleetopt:fleet slot 3:x")

    @given(
        kind=st.text(alphabet=st.characters(blacklist_characters=":", blacklist_categories=["Z", "C"]), min_size=1),
        cause=st.text(),
    )
    def test_parse_reads_back_what_str_wrote(self, kind: str, cause: str) -> None:
        if len(kind) + 1 + len(cause) > MAX_TRIGGER_CHARS or any(c.isspace() for c in kind):
            return
        trigger = SnapshotTrigger(kind=kind, cause=cause)
        assert trigger == SnapshotTrigger.parse(str(trigger))

    @pytest.mark.parametrize("text", ["bench", "", ":every 5s", "eb plus:x", "admission:" + "x" * MAX_TRIGGER_CHARS])
    def test_a_string_without_a_kind_or_too_long_is_refused(self, text: str) -> None:
        with pytest.raises(ValueError, match="trigger"):
            SnapshotTrigger.parse(text)


class TestTriggerField:
    def test_the_field_reads_the_string_and_writes_it_back_unchanged(self) -> None:
        trigger = TRIGGER.validate_json('"admission:every 5s"')
        assert trigger == SnapshotTrigger(kind="admission", cause="every 5s")
        assert json.loads(TRIGGER.dump_json(trigger)) == "admission:every 5s"
        assert TRIGGER.dump_python(trigger) == "admission:every 5s"

    def test_a_non_string_is_a_validation_error(self) -> None:
        with pytest.raises(ValidationError, match="kind:cause"):
            TRIGGER.validate_python(5)
