"""Which engines a policy applies to, judged on the typed registration (decide/registry.py)."""

from __future__ import annotations

from decide.registry import engine_obeys
from schemas.estimates import EngineRegistration


def _registration(obeys: list[str] | None) -> EngineRegistration:
    return EngineRegistration(
        model="m",
        gpu="g",
        max_num_seqs=16,
        max_num_batched_tokens=2048,
        max_model_len=4096,
        kv_blocks_total=100,
        block_size_tokens=16,
        obeys=obeys,
    )


class TestEngineObeys:
    def test_an_engine_that_lists_kinds_gets_those_kinds_only(self) -> None:
        assert engine_obeys("ebplus")(_registration(["ebplus", "admission"]))
        assert not engine_obeys("slai")(_registration(["ebplus", "admission"]))
        assert not engine_obeys("slai")(_registration([]))

    def test_an_engine_that_declares_nothing_or_has_not_registered_gets_every_kind(self) -> None:
        assert engine_obeys("slai")(_registration(None))
        assert engine_obeys("slai")(None)
