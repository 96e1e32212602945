"""EB+'s mode spelt one way: ``EbplusMode`` in Python and on the wire, the old spelling still read."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from schemas.policy_docs.ebplus import EbplusMode, EbplusState
from schemas.steps import StepReport, scheduler_mode_label
from tests.unit.schemas.event_samples import sample_events


def _step_json(scheduler_mode: str | None) -> str:
    step = next(e for e in sample_events() if isinstance(e, StepReport))
    return json.dumps(json.loads(step.model_dump_json()) | {"scheduler_mode": scheduler_mode})


class TestEbplusMode:
    @pytest.mark.parametrize(("text", "mode"), [("EB", EbplusMode.EB), ("eb", EbplusMode.EB), ("mb", EbplusMode.MB)])
    def test_either_spelling_names_the_mode(self, text: str, mode: EbplusMode) -> None:
        assert EbplusMode.named(text) is mode

    def test_another_label_names_no_mode(self) -> None:
        assert EbplusMode.named("slai") is None

    def test_a_document_reads_the_lower_case_spelling_and_writes_the_upper(self) -> None:
        state = EbplusState.model_validate_json('{"mode": "eb"}')
        assert state.mode is EbplusMode.EB
        assert json.loads(state.model_dump_json())["mode"] == "EB"

    def test_a_document_refuses_a_string_that_is_no_mode(self) -> None:
        with pytest.raises(ValidationError, match="mode must be EB or MB"):
            EbplusState.model_validate_json('{"mode": "exclusive"}')


class TestStepSchedulerMode:
    def test_a_step_written_with_the_old_spelling_reads_as_the_mode(self) -> None:
        step = StepReport.model_validate_json(_step_json("mb"))
        assert step.scheduler_mode == EbplusMode.MB
        assert json.loads(step.model_dump_json())["scheduler_mode"] == "MB"

    @pytest.mark.parametrize("label", ["slai", "stock", "dp", None])
    def test_other_labels_are_kept_as_written(self, label: str | None) -> None:
        assert StepReport.model_validate_json(_step_json(label)).scheduler_mode == label

    def test_raw_step_labels_count_both_spellings_as_one_mode(self) -> None:
        assert [scheduler_mode_label(m) for m in ("eb", "EB", "mb", "slai")] == ["EB", "EB", "MB", "slai"]
