"""The in-memory store keeps the same all-or-nothing and compare-and-set rules as Redis."""

from __future__ import annotations

import json

import pytest

from schemas.errors import InvalidInputError
from schemas.policy_docs.base import MAX_VERSION
from services.store.memory_store import MemoryStore
from services.store.policy_versions import stored_version


class TestCommit:
    def test_commit_writes_states_summaries_and_offsets_together(self) -> None:
        store = MemoryStore()
        assert store.commit("stream", {"t:0": 5}, {"eng": "{}"}, {"k": "v"})
        assert store.applied_offsets("stream") == {"t:0": 5}
        assert store.load_states("stream", ["eng", "other"]) == {"eng": "{}"}

    def test_commit_at_or_below_a_stored_offset_writes_nothing(self) -> None:
        store = MemoryStore()
        store.commit("stream", {"t:0": 5, "t:1": 2}, {"eng": "old"}, {})
        assert not store.commit("stream", {"t:0": 9, "t:1": 2}, {"eng": "new"}, {})
        assert store.load_states("stream", ["eng"]) == {"eng": "old"}
        assert store.applied_offsets("stream") == {"t:0": 5, "t:1": 2}


class TestPutPolicy:
    def test_lower_or_equal_version_is_refused_and_history_is_capped(self) -> None:
        store = MemoryStore(history_cap=3)
        for version in range(1, 6):
            assert store.put_policy("k", "s", version, json.dumps({"version": version}))
        assert not store.put_policy("k", "s", 5, json.dumps({"version": 5}))
        assert not store.put_policy("k", "s", 2, json.dumps({"version": 2}))
        assert [json.loads(d)["version"] for d in store.policy_history("k", "s")] == [5, 4, 3]
        assert len(store.announcements) == 5


class TestVersionBound:
    """Versions are integers in [0, 2**53 - 1], as put_policy.lua compares them exactly."""

    @pytest.mark.parametrize("version", [-1, MAX_VERSION + 1, 2**62])
    def test_an_out_of_bound_version_is_refused_at_write(self, version: int) -> None:
        store = MemoryStore()
        with pytest.raises(InvalidInputError, match="policy version"):
            store.put_policy("k", "s", version, json.dumps({"version": version}))
        assert store.get_policy("k", "s") is None

    @pytest.mark.parametrize("stored", [MAX_VERSION + 1, 2**62, -5])
    def test_an_out_of_bound_stored_version_counts_as_absent(self, stored: int) -> None:
        store = MemoryStore()
        store.policies[("k", "s")] = json.dumps({"version": stored})
        assert stored_version(store.policies[("k", "s")]) is None
        assert store.put_policy("k", "s", 1, json.dumps({"version": 1}))

    def test_the_bound_itself_is_a_version(self) -> None:
        store = MemoryStore()
        assert store.put_policy("k", "s", MAX_VERSION, json.dumps({"version": MAX_VERSION}))
        assert not store.put_policy("k", "s", MAX_VERSION - 1, json.dumps({"version": MAX_VERSION - 1}))


class TestUnreadableCurrentValue:
    @pytest.mark.parametrize("garbage", ["not json {", "[1, 2]", '{"version": "seven"}', "null", '{"version": true}'])
    def test_a_value_without_a_readable_version_counts_as_absent_and_is_overwritten(self, garbage: str) -> None:
        store = MemoryStore()
        store.policies[("admission", "eng-0")] = garbage
        assert store.put_policy("admission", "eng-0", 1, '{"version": 1}')
        assert store.get_policy("admission", "eng-0") == '{"version": 1}'

    def test_a_readable_version_still_fences_and_a_fraction_reads_as_its_floor(self) -> None:
        store = MemoryStore()
        store.policies[("admission", "eng-0")] = '{"version": 3.5}'
        assert stored_version(store.policies[("admission", "eng-0")]) == 3
        assert not store.put_policy("admission", "eng-0", 3, '{"version": 3}')
        assert store.put_policy("admission", "eng-0", 4, '{"version": 4}')
