"""Wiring of BF-IO (seed 003): the router bundle's inputs from a DP engine summary, and its spec.

specs/seed-003-bfio.md sections 6.4-6.5: the bundle is built from the stream estimates of one DP
deployment (the DP engine is the scope): the censoring-aware Kaplan-Meier survival of output length
(log-binned, ``survival`` in the summary), the step model T = C + t_l max_g L_g fitted from rank
reports (``dp.step_model``, paper Eq. 6) and the registration (``engine.dp_size``,
``engine.max_num_seqs``). Engines without ``dp_size`` get no bundle. The router hot-reloads the
bundle through the policy source (kind ``bfio``, scope the DP engine id) every step.

Deviation: the summary carries one survival table per engine, published as class ``default`` and
used for every request (the spec's per-class tables need a class key on the events).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from policies.bfio import BfioInputs, BfioParams, SurvivalTable
from policies.bfio import decide as decide_bfio
from schemas.estimates import EngineSummary
from schemas.policy_docs import BfioPolicy
from schemas.records import EstimateSnapshot
from services.policy.registry import PolicySpec, engine_obeys
from services.policy.wiring.summary import bind_params, engine_summary
from services.triggers import EverySeconds

BFIO_INTERVAL_S = 1.0  # spec 6.2: tier-1 loop every 100 ms to 5 s
DEFAULT_CLASS = "default"


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
    """BF-IO inputs from a DP engine's summary; None for an engine without ``dp_size`` (not DP).

    The survival table and the step-model fit are optional (the bundle then uses H = 0 and the
    reference step constants); a fit with a negative coefficient is treated as not fitted.
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
    return BfioInputs(
        num_ranks=engine.dp_size,
        slots_per_rank=engine.max_num_seqs // engine.dp_size,
        survival_tables=() if table is None else (table,),
        default_class=None if table is None else DEFAULT_CLASS,
        step_c_s=c_s,
        step_t_l_s_per_token=t_l,
    )


def bfio_spec(params: BfioParams | None = None, *, interval_s: float = BFIO_INTERVAL_S) -> PolicySpec:
    """BF-IO bundle per DP engine, every ``interval_s`` seconds of the engine's event time."""
    return PolicySpec(
        kind="bfio",
        scope="engine",
        trigger=EverySeconds(seconds=interval_s),
        document_type=BfioPolicy,
        inputs_from_snapshot=bfio_inputs,
        decide=bind_params(decide_bfio, params or BfioParams()),
        applies_to=is_dp_engine,
    )


def is_dp_engine(engine: Mapping[str, Any]) -> bool:
    """True for an engine registered with more than one data-parallel rank whose router obeys BF-IO."""
    dp_size = engine.get("dp_size")
    return isinstance(dp_size, int) and dp_size > 1 and engine_obeys("bfio")(engine)
