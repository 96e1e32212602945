"""A partition's engines reset after a log reset keep their typed registration (services/stream/log_rebuild.py)."""

from __future__ import annotations

import json

from fold.engine_estimates import EngineEstimates
from schemas.estimates import EngineRegistration
from services.stream.log_rebuild import reset_state

REGISTRATION = EngineRegistration(
    model="m",
    gpu="g",
    max_num_seqs=16,
    max_num_batched_tokens=2048,
    max_model_len=4096,
    kv_blocks_total=100,
    block_size_tokens=16,
    obeys=["ebplus"],
)


def _stored(engine: dict[str, object], snapshot_version: int = 7) -> str:
    state = EngineEstimates("eng-0")
    state.snapshot_version = snapshot_version
    return json.dumps(state.to_dict() | {"engine": engine})


class TestResetState:
    def test_the_registration_and_the_snapshot_version_survive_the_reset(self) -> None:
        reset = EngineEstimates.from_dict(json.loads(reset_state("eng-0", _stored(REGISTRATION.model_dump()), 3)))
        assert (reset.engine, reset.snapshot_version) == (REGISTRATION, 7)

    def test_an_unreadable_registration_is_dropped_and_the_rest_kept(self) -> None:
        reset = EngineEstimates.from_dict(json.loads(reset_state("eng-0", _stored({"model": 5}), 3)))
        assert (reset.engine, reset.snapshot_version) == (None, 7)

    def test_an_engine_with_no_stored_state_starts_unregistered(self) -> None:
        reset = EngineEstimates.from_dict(json.loads(reset_state("eng-0", None, 3)))
        assert (reset.engine, reset.snapshot_version) == (None, 3)
