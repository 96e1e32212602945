"""BF-IO wiring: the bundle's inputs from a real DP engine summary, and the registered spec."""

from __future__ import annotations

import itertools

import pytest

from decide.from_snapshot import decide_from_snapshot
from decide.specs import default_registry
from decide.wiring.bfio import DpGroups, bfio_inputs, bfio_spec, is_dp_engine, pooled_survival
from decide.wiring.summary import engine_summary
from estimators import DEFAULT_MAX_SURVIVAL_EDGES, log_bin_edges_tokens
from fold.triggers import EverySeconds
from schemas.engines import EngineRegistered
from schemas.estimates import EngineRegistration, StepModelFit, SurvivalSummary
from schemas.policy_docs import BfioPolicy
from schemas.records import EstimateSnapshot
from services.replay.offline import OfflineControlPlane
from services.testing.models import changed
from services.testing.streams import synthetic_stream
from tests.fixtures import last_snapshot


@pytest.fixture
def snapshot(demo_plane: OfflineControlPlane) -> EstimateSnapshot:
    """The last BF-IO snapshot of the demo's DP engine (4 ranks x 16 slots)."""
    return last_snapshot(demo_plane, "bfio", "dp-0")


def _with(snapshot: EstimateSnapshot, **update: object) -> EstimateSnapshot:
    return changed(snapshot, estimates=changed(engine_summary(snapshot), **update))


class TestBfioInputs:
    def test_reads_shape_survival_and_step_model(self, snapshot: EstimateSnapshot) -> None:
        """G = dp_size, B = max_num_seqs / G, the survival table as class default, the fitted C and t_l."""
        summary = engine_summary(snapshot)
        assert summary.survival is not None
        assert summary.dp is not None
        assert summary.dp.step_model is not None
        inputs = bfio_inputs(snapshot)
        assert inputs is not None
        assert (inputs.num_ranks, inputs.slots_per_rank) == (4, 16)
        assert inputs.default_class == "default"
        (table,) = inputs.survival_tables
        assert table.edges_tokens == tuple(summary.survival.bin_edges_tokens)
        assert table.survival_frac == tuple(summary.survival.survival_frac)
        assert table.n_events == summary.survival.n_samples - summary.survival.n_censored
        model = summary.dp.step_model
        assert (inputs.step_c_s, inputs.step_t_l_s_per_token) == (model.c_s, model.t_l_s_per_token)

    def test_an_engine_without_a_registration_gets_no_bundle(self, snapshot: EstimateSnapshot) -> None:
        assert bfio_inputs(_with(snapshot, engine=None)) is None

    def test_missing_survival_and_unphysical_fit_are_left_out(self, snapshot: EstimateSnapshot) -> None:
        """No survival table and a negative t_l: no tables and no fitted step model (defaults apply)."""
        summary = engine_summary(snapshot)
        assert summary.dp is not None
        bad_fit = StepModelFit(c_s=0.005, t_l_s_per_token=-1e-7, n_samples=40)
        dp = changed(summary.dp, step_model=bad_fit)
        inputs = bfio_inputs(_with(snapshot, survival=None, dp=dp))
        assert inputs is not None
        assert inputs.survival_tables == ()
        assert inputs.default_class is None
        assert inputs.step_c_s is None
        assert inputs.step_t_l_s_per_token is None


class TestBfioSpec:
    def test_registered_by_default_every_second(self) -> None:
        """default_registry runs the BF-IO bundle per engine on an event-time interval."""
        spec = default_registry().get("bfio")
        assert spec.scope == "engine"
        assert spec.trigger == EverySeconds(seconds=1.0)
        assert spec.document_type is BfioPolicy

    def test_decides_a_bundle_from_a_snapshot(self, snapshot: EstimateSnapshot) -> None:
        """The spec turns the DP summary into a BF-IO document with the fitted step model."""
        summary = engine_summary(snapshot)
        assert summary.dp is not None
        assert summary.dp.step_model is not None
        outcome = decide_from_snapshot(bfio_spec(interval_s=0.5), snapshot, None)
        document = outcome.document
        assert isinstance(document, BfioPolicy)
        assert document.scope == "dp-0"
        assert document.payload.step_model.c_s == pytest.approx(summary.dp.step_model.c_s)
        assert [t.traffic_class for t in document.payload.survival_tables] == ["default"]

    def test_only_dp_engines_are_snapshotted_for_it(self, demo_plane: OfflineControlPlane) -> None:
        assert {s.scope for s in demo_plane.snapshots if s.trigger.kind == "bfio"} == {"dp-0"}


def _rank(
    snapshot: EstimateSnapshot, engine_id: str, ts: float, *, group: str | None, **update: object
) -> EstimateSnapshot:
    """The demo DP engine's real summary as one rank (a separate server, ``dp_size`` 1) of ``group``."""
    summary = engine_summary(snapshot)
    assert summary.engine is not None
    engine = changed(summary.engine, dp_size=1, max_num_seqs=16, dp_group=group)
    estimates = changed(summary, engine_id=engine_id, engine=engine, dp=None, **update)
    return changed(snapshot, scope=engine_id, ts=ts, estimates=estimates)


def _survival(edges: list[float], fracs: list[float], n_samples: int, n_censored: int = 0) -> SurvivalSummary:
    return SurvivalSummary(bin_edges_tokens=edges, survival_frac=fracs, n_samples=n_samples, n_censored=n_censored)


class TestDpGroups:
    def test_pooled_survival_is_the_survival_of_the_pooled_samples(self) -> None:
        """Rank A saw outputs 1, 3, 3, 5 and rank B 5, 5: S(n) = P(O > n) of all six at edges 0, 2, 4, 6."""
        edges = [0.0, 2.0, 4.0, 6.0]
        a = _survival(edges, [1.0, 0.75, 0.25, 0.0], 4)
        b = _survival(edges, [1.0, 1.0, 1.0, 0.0], 2)
        pooled = pooled_survival([a, b])
        assert pooled is not None
        assert pooled.survival_frac == pytest.approx([1.0, 5 / 6, 3 / 6, 0.0])
        assert (pooled.n_samples, pooled.n_censored) == (6, 0)

    def test_pooling_reads_every_table_on_the_union_of_their_edges_and_skips_empty_ones(self) -> None:
        """Tables on edges (0, 8) and (0, 4), each a step function: at 4 the first is still 1 and the second 0,
        so S(4) = 10 / 13; at 8 S = 10 x 0.5 / 13 (the stream processor publishes each rank at its own
        event lengths, so the ranks' edges differ)."""
        big = _survival([0.0, 8.0], [1.0, 0.5], 10, 2)
        other_edges = _survival([0.0, 4.0], [1.0, 0.0], 3)
        empty = _survival([], [], 0)
        pooled = pooled_survival([other_edges, big, empty])
        assert pooled is not None
        assert pooled.bin_edges_tokens == [0.0, 4.0, 8.0]
        assert pooled.survival_frac == pytest.approx([1.0, 10 / 13, 5 / 13])
        assert (pooled.n_samples, pooled.n_censored) == (13, 2)
        assert pooled_survival([empty]) is None

    def test_pooled_edges_stay_within_the_published_bound(self) -> None:
        """Four ranks with 400 distinct event lengths each: the pooled table keeps at most
        DEFAULT_MAX_SURVIVAL_EDGES edges, the log grid among them, and the shortest lengths at every token."""
        tables = []
        for rank in range(4):
            edges = [0.0, *(float(1 + rank + 4 * i) for i in range(400))]
            fracs = [1.0, *(1.0 - (i + 1) / 401 for i in range(400))]
            tables.append(_survival(edges, fracs, 500))
        pooled = pooled_survival(tables)
        assert pooled is not None
        assert len(pooled.bin_edges_tokens) == DEFAULT_MAX_SURVIVAL_EDGES
        assert pooled.bin_edges_tokens[:65] == [float(n) for n in range(65)]
        assert set(log_bin_edges_tokens(max_tokens=32_768)) <= set(pooled.bin_edges_tokens)
        assert all(b <= a for a, b in itertools.pairwise(pooled.survival_frac))

    def test_fractional_edges_pool_on_the_largest_tables_edges(self) -> None:
        big = _survival([0.0, 8.5], [1.0, 0.5], 10, 2)
        other_edges = _survival([0.0, 4.0], [1.0, 0.0], 3)
        assert pooled_survival([other_edges, big]) == big

    def test_a_group_of_ranks_is_decided_as_one_dp_deployment(self, snapshot: EstimateSnapshot) -> None:
        summary = engine_summary(snapshot)
        assert summary.survival is not None
        groups = DpGroups(slot_s=1.0)
        first = groups.add(_rank(snapshot, "rank-0", 100.2, group="dp-a"))
        second = groups.add(_rank(snapshot, "rank-1", 100.7, group="dp-a", survival=None))
        assert first is not None
        assert second is not None
        assert groups.ranks("dp-a") == ["rank-0", "rank-1"]
        assert (second.scope, second.version) == ("dp-a", 101)
        inputs = bfio_inputs(second)
        assert inputs is not None
        assert (inputs.num_ranks, inputs.slots_per_rank) == (2, 16)
        (table,) = inputs.survival_tables
        assert table.survival_frac == pytest.approx(summary.survival.survival_frac), "rank-1 has no table to pool"
        assert (inputs.step_c_s, inputs.step_t_l_s_per_token) == (None, None), "separate servers: no Eq. 6 fit"
        outcome = decide_from_snapshot(bfio_spec(), second, None)
        assert isinstance(outcome.document, BfioPolicy)
        assert outcome.document.scope == "dp-a"
        assert outcome.document.payload.survival_tables[0].n_samples == summary.survival.n_samples
        later = decide_from_snapshot(bfio_spec(), first, outcome.document)
        assert later.skipped == "duplicate_snapshot", "one decision per slot, whichever rank fires"

    def test_a_rank_leaves_its_group_when_it_moves_or_falls_silent(self, snapshot: EstimateSnapshot) -> None:
        groups = DpGroups(slot_s=1.0, silent_s=30.0)
        groups.add(_rank(snapshot, "rank-0", 100.0, group="dp-a"))
        groups.add(_rank(snapshot, "rank-1", 100.0, group="dp-a"))
        groups.add(_rank(snapshot, "rank-2", 100.0, group="dp-a"))
        assert groups.add(_rank(snapshot, "rank-1", 101.0, group=None)) is None
        moved = groups.add(_rank(snapshot, "rank-2", 102.0, group="dp-b"))
        assert moved is not None
        assert groups.ranks("dp-b") == ["rank-2"]
        late = groups.add(_rank(snapshot, "rank-3", 131.0, group="dp-a"))
        assert late is not None
        assert groups.ranks("dp-a") == ["rank-3"], "rank-0 last reported 31 s before"
        inputs = bfio_inputs(late)
        assert inputs is not None
        assert inputs.num_ranks == 1

    def test_ranks_of_a_group_are_snapshotted_whatever_their_scheduler_obeys(self) -> None:
        assert is_dp_engine(_registration(dp_size=1, dp_group="dp-a", obeys=["ebplus"]))
        assert not is_dp_engine(_registration(dp_size=1, dp_group=None, obeys=None))
        assert not is_dp_engine(_registration(dp_size=4, obeys=["ebplus"]))
        assert is_dp_engine(_registration(dp_size=4, obeys=["bfio"]))
        assert is_dp_engine(_registration(dp_size=4, obeys=None)), "an engine that declares nothing obeys every kind"

    def test_an_engine_not_registered_yet_is_not_snapshotted(self) -> None:
        assert not is_dp_engine(None)


def _registration(*, dp_size: int, dp_group: str | None = None, obeys: list[str] | None) -> EngineRegistration:
    return EngineRegistration(
        model="m",
        gpu="g",
        max_num_seqs=16,
        max_num_batched_tokens=2048,
        max_model_len=4096,
        kv_blocks_total=100,
        block_size_tokens=16,
        dp_size=dp_size,
        dp_group=dp_group,
        obeys=obeys,
    )


def test_engines_registered_as_ranks_of_a_group_get_one_bundle_for_the_group() -> None:
    """Two engines' telemetry, registered with ``dp_group``, through the offline fold and decision maker."""
    plane = OfflineControlPlane("dep", default_registry())
    for event in synthetic_stream(engines=2, requests=400):
        rank = int(event.engine_id[-1])
        registered = isinstance(event, EngineRegistered)
        plane.publish(changed(event, dp_group="dp-x", dp_rank=rank) if registered else event)
    taken = {s.scope for s in plane.snapshots if s.trigger.kind == "bfio"}
    assert taken == {"eng-0", "eng-1"}, "each rank's telemetry is snapshotted for BF-IO"
    bundles = [r for r in plane.decisions if r.kind == "bfio"]
    assert bundles
    assert {r.scope for r in bundles} == {"dp-x"}
    assert plane.store.get_policy("bfio", "eng-0") is None
    stored = plane.store.get_policy("bfio", "dp-x")
    assert stored is not None
    document = BfioPolicy.model_validate_json(stored)
    assert document.version == len(bundles)
    rank_snapshots = [s for s in plane.snapshots if s.trigger.kind == "bfio"]
    assert len(bundles) == len({int(s.ts) for s in rank_snapshots}) < len(rank_snapshots), "one bundle per 1 s slot"
    latest = {s.scope: engine_summary(s).survival for s in rank_snapshots}
    (table,) = document.payload.survival_tables
    assert table.n_samples == sum(t.n_samples for t in latest.values() if t is not None), "both ranks' samples"
