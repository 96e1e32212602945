"""Wiring of BF-IO (seed 003): the router bundle's inputs from a DP engine summary, and its spec.

specs/seed-003-bfio.md sections 6.4-6.5: the bundle is built from the stream estimates of one DP
deployment: the censoring-aware Kaplan-Meier survival of output length (log-binned, ``survival`` in the
summary), the step model T = C + t_l max_g L_g fitted from rank reports (``dp.step_model``, paper Eq. 6)
and the registration (``engine.dp_size``, ``engine.max_num_seqs``). The router hot-reloads the bundle
through the policy source (kind ``bfio``) every step.

A DP deployment is one of two things. A DP engine (one engine registered with ``dp_size`` > 1, its ranks
inside it) is its own scope. A group of separate servers, each registered as one rank of a ``dp_group``
(vLLM's external load-balancing mode, or independent servers behind ``governor gateway``), is decided as
one deployment whose scope is the group's name, the key ``governor gateway`` reads for its central pool
(services/gateway/ranks.py): ``DpGroups`` keeps each rank's latest snapshot and presents the group as one
DP engine, G = its ranks, B = the smallest rank's ``max_num_seqs``, and the ranks' survival tables pooled
(``pooled_survival``). The gateway obeys the bundle for the group, so a rank's own ``obeys`` (what its
scheduler obeys) does not gate it. Engines in neither form get no bundle.

Deviations: the summary carries one survival table per engine, published as class ``default`` and
used for every request (the spec's per-class tables need a class key on the events). A group has no
step model: separate servers step independently, with no barrier for Eq. 6 to fit, so its bundle uses
the reference step constants. The ranks' snapshots travel on ``gov.estimates`` keyed by engine, so a group's
ranks can sit on different partitions: the group is pooled from the latest snapshots the service has read
when a rank opens a slot (a replay that interleaves the partitions differently can pool a rank's previous
table), and with several policy-service instances each decides the group from the ranks it owns. Keying
the ranks' BF-IO snapshots by group, as fleet contributions are keyed, would remove both.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from decide.registry import PolicySpec, engine_obeys
from decide.wiring.summary import bind_params, engine_summary
from estimators import fine_bin_edges_tokens
from fold.engine_estimates import SURVIVAL_MAX_TOKENS
from fold.triggers import EverySeconds
from policies.bfio import BfioInputs, BfioParams, SelfCheckWindow, SurvivalTable
from policies.bfio import decide as decide_bfio
from schemas.estimates import EngineRegistration, EngineSummary, SurvivalSummary
from schemas.policy_docs import BfioPolicy
from schemas.records import EstimateSnapshot

BFIO_KIND = "bfio"
BFIO_INTERVAL_S = 1.0  # spec 6.2: tier-1 loop every 100 ms to 5 s
DEFAULT_CLASS = "default"
RANK_SILENT_S = 30.0  # a rank without a snapshot for this long (event time) leaves its group's estimate


def _survival(s: EngineSummary) -> SurvivalTable | None:
    """The engine's survival table, or None when absent or empty."""
    table = s.survival
    if table is None or not table.bin_edges_tokens or len(table.bin_edges_tokens) != len(table.survival_frac):
        return None
    return SurvivalTable(
        traffic_class=DEFAULT_CLASS,
        edges_tokens=tuple(float(e) for e in table.bin_edges_tokens),
        survival_frac=tuple(min(1.0, max(0.0, float(v))) for v in table.survival_frac),
        n_samples=table.n_samples,
        n_censored=table.n_censored,
    )


def bfio_inputs(snapshot: EstimateSnapshot) -> BfioInputs | None:
    """BF-IO inputs from a DP engine's summary (or a group's, ``group_snapshot``); None without a registration.

    The survival table and the step-model fit are optional (the bundle then uses H = 0 and the
    reference step constants); a fit with a negative coefficient is treated as not fitted. The self-check's
    windowed sums (``dp.self_check``, folded from the engine's ``bfio.self_check`` reports) go in as they are.
    """
    s = engine_summary(snapshot)
    engine = s.engine
    if engine is None or engine.dp_size < 1 or engine.max_num_seqs < engine.dp_size:
        return None
    fit = s.dp.step_model if s.dp is not None else None
    c_s, t_l = (fit.c_s, fit.t_l_s_per_token) if fit is not None else (None, None)
    if c_s is None or t_l is None or c_s < 0.0 or t_l < 0.0:
        c_s, t_l = None, None
    table = _survival(s)
    check = s.dp.self_check if s.dp is not None else None
    return BfioInputs(
        num_ranks=engine.dp_size,
        slots_per_rank=engine.max_num_seqs // engine.dp_size,
        survival_tables=() if table is None else (table,),
        default_class=None if table is None else DEFAULT_CLASS,
        step_c_s=c_s,
        step_t_l_s_per_token=t_l,
        self_check=None
        if check is None
        else SelfCheckWindow(
            judged_steps=check.judged_steps,
            myopic_imbalance_tokens=check.myopic_imbalance_tokens,
            lookahead_imbalance_tokens=check.lookahead_imbalance_tokens,
            squared_difference_tokens2=check.squared_difference_tokens2,
        ),
    )


def dp_group_of(snapshot: EstimateSnapshot) -> str | None:
    """The ``dp_group`` an engine snapshot's engine registered as a rank of; None for a standalone engine."""
    summary = snapshot.estimates
    if not isinstance(summary, EngineSummary) or summary.engine is None:
        return None
    return summary.engine.dp_group


def pooled_survival(tables: Sequence[SurvivalSummary]) -> SurvivalSummary | None:
    """One survival table for a group's ranks: the sample-weighted mean of the tables' step functions.

    The gateway spreads one request stream over the ranks, so each rank's Kaplan-Meier table estimates the
    same output-length law. Where no request is censored, the weighted mean of the ranks' empirical
    survivals is exactly the survival of their pooled samples; with censoring it approximates the pooled
    Kaplan-Meier estimate (exact when the ranks censor alike). Each table's step function
    S(n) = survival_frac[j] on [edges[j], edges[j + 1]) is read at every edge of every table and the mean
    published on those edges, at most ``DEFAULT_MAX_SURVIVAL_EDGES`` (``estimators.fine_bin_edges_tokens``:
    the log grid and the shortest edges when the union is larger). The stream processor publishes every
    rank on the same edges (``estimators.smoothed_survival_table``), so in practice the union is those;
    tables of other publishers (the curve at its event lengths) differ per rank and pool the same way.
    Tables whose edges are not whole tokens (none the stream processor writes) are pooled only on the
    edges of the table with the most samples. None when no rank has a usable table.
    """
    usable = [t for t in tables if t.bin_edges_tokens and len(t.bin_edges_tokens) == len(t.survival_frac)]
    if not usable:
        return None
    n_samples = sum(t.n_samples for t in usable)
    if n_samples == 0:
        return usable[0]
    n_censored = sum(t.n_censored for t in usable)
    if all(float(e).is_integer() and 0 <= e <= SURVIVAL_MAX_TOKENS for t in usable for e in t.bin_edges_tokens):
        union = {int(e) for t in usable for e in t.bin_edges_tokens}
        edges = [float(e) for e in fine_bin_edges_tokens(union, max_tokens=SURVIVAL_MAX_TOKENS)]
    else:
        edges = list(max(usable, key=lambda t: t.n_samples).bin_edges_tokens)
        usable = [t for t in usable if t.bin_edges_tokens == edges]
        n_samples = sum(t.n_samples for t in usable)
        n_censored = sum(t.n_censored for t in usable)
    at = np.asarray(edges, dtype=np.float64)
    pooled = np.zeros_like(at)
    for t in usable:
        index = np.searchsorted(np.asarray(t.bin_edges_tokens, dtype=np.float64), at, side="right") - 1
        values = np.where(index < 0, 1.0, np.asarray(t.survival_frac, dtype=np.float64)[np.clip(index, 0, None)])
        pooled += t.n_samples * values
    fracs = np.minimum.accumulate(np.clip(pooled / n_samples, 0.0, 1.0))
    return SurvivalSummary(
        bin_edges_tokens=edges, survival_frac=[float(v) for v in fracs], n_samples=n_samples, n_censored=n_censored
    )


def group_snapshot(
    group: str, ranks: Sequence[EstimateSnapshot], trigger: EstimateSnapshot, slot_s: float
) -> EstimateSnapshot:
    """The group's ranks presented as one DP engine: the snapshot a group's bundle is decided from.

    ``trigger`` is the rank snapshot that fired the decision (its time, id and summary carry over). The
    version is the ``slot_s`` event-time slot the trigger falls in, so the group is decided once per
    slot whichever rank fires first, a redelivered rank snapshot is a duplicate, and the numbering
    survives a restart of the policy service.
    """
    summaries = [s.estimates for s in ranks if isinstance(s.estimates, EngineSummary)]
    registrations = [s.engine for s in summaries if s.engine is not None]
    fired = engine_summary(trigger)
    assert fired.engine is not None
    slots = min(r.max_num_seqs for r in registrations)
    engine = fired.engine.model_copy(update={"dp_size": len(registrations), "max_num_seqs": slots * len(registrations)})
    tables = [s.survival for s in summaries if s.survival is not None]
    estimates = fired.model_copy(
        update={"engine_id": group, "engine": engine, "survival": pooled_survival(tables), "dp": None}
    )
    offsets = [offset for s in ranks for offset in s.offsets]
    return trigger.model_copy(
        update={
            "scope": group,
            "version": int(trigger.ts // slot_s) + 1,
            "offsets": offsets,
            "estimates": estimates,
            "signature": None,
        }
    )


class DpGroups:
    """The latest snapshot of every rank of every ``dp_group``, turned into group snapshots as ranks report.

    State of the policy service like the fleet aggregators, built from the snapshot sequence alone, so
    the live service and an offline replay decide the same bundles. A rank that registers again in
    another group (or in none) moves; one silent for ``silent_s`` of event time leaves its group.
    """

    def __init__(self, *, slot_s: float = BFIO_INTERVAL_S, silent_s: float = RANK_SILENT_S) -> None:
        self._slot_s = slot_s
        self._silent_s = silent_s
        self._ranks: dict[str, dict[str, EstimateSnapshot]] = {}
        self._group_of: dict[str, str] = {}

    def add(self, snapshot: EstimateSnapshot) -> EstimateSnapshot | None:
        """Take one rank's BF-IO snapshot; return its group's snapshot, or None for an engine in no group."""
        group = dp_group_of(snapshot)
        previous = self._group_of.pop(snapshot.scope, None)
        if previous is not None and previous != group:
            self._ranks[previous].pop(snapshot.scope, None)
            if not self._ranks[previous]:
                del self._ranks[previous]
        if group is None:
            return None
        self._group_of[snapshot.scope] = group
        ranks = self._ranks.setdefault(group, {})
        ranks[snapshot.scope] = snapshot
        for engine_id in [e for e, s in ranks.items() if s.ts < snapshot.ts - self._silent_s]:
            del ranks[engine_id]
            del self._group_of[engine_id]
        return group_snapshot(group, [ranks[e] for e in sorted(ranks)], snapshot, self._slot_s)

    def ranks(self, group: str) -> list[str]:
        """The engine ids the group's estimate is pooled from."""
        return sorted(self._ranks.get(group, {}))


def bfio_spec(params: BfioParams | None = None, *, interval_s: float = BFIO_INTERVAL_S) -> PolicySpec:
    """BF-IO bundle per DP engine, every ``interval_s`` seconds of the engine's event time."""
    return PolicySpec(
        kind=BFIO_KIND,
        scope="engine",
        trigger=EverySeconds(seconds=interval_s),
        document_type=BfioPolicy,
        inputs_from_snapshot=bfio_inputs,
        decide=bind_params(decide_bfio, params or BfioParams()),
        applies_to=is_dp_engine,
    )


def is_dp_engine(engine: EngineRegistration | None) -> bool:
    """True for a rank of a ``dp_group`` (the gateway obeys BF-IO for it), and for an engine registered with
    more than one data-parallel rank whose router obeys BF-IO; False for an engine not registered yet."""
    if engine is None:
        return False
    if engine.dp_group is not None:
        return True
    return engine.dp_size > 1 and engine_obeys(BFIO_KIND)(engine)
