"""From two recorded runs of the same workload to the governed-vs-round-robin comparison.

Everything here is computed from what was recorded (the client's outcomes, the gateway's ``/metrics`` text
and its JSON log), so it is tested without vLLM and a run's JSON can be summarised again later.

Per-rank load imbalance is BF-IO's: at each instant, a rank's load is the prompt and the generated tokens of
the requests in flight there (generated tokens counted as streamed evenly between the first token and the
end, which the client sees), and the imbalance is (max - mean) / mean over the ranks of the DP group, sampled
every ``sample_s`` while some rank of the group is loaded. It is reconstructed from the outcomes, so both runs
are measured the same way whichever balancer served them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from services.fleet_run.client import Outcome

SAMPLE_S = 0.1


@dataclass(frozen=True, slots=True, kw_only=True)
class AppliedDocument:
    """A policy document the gateway used for the first time (its ``policy_applied`` log line)."""

    kind: str
    scope: str
    version: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ArmSummary:
    """One run's figures. Latencies in ms over the requests served; None when none was served.

    ``refused_by_reason`` counts the refusals the client got by the error code of their body (the gateway's
    shed reason, ``deadline`` or ``queue_full``; ``status-<n>`` for a body without one).
    """

    name: str
    requests: int
    served: int
    refused: int
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    tpot_p50_ms: float | None
    tpot_p99_ms: float | None
    output_tokens_per_s: float
    makespan_s: float
    requests_per_upstream: dict[str, int]
    rank_imbalance_mean: float | None
    rank_imbalance_p90: float | None
    shed: int
    compressed: int
    applied: tuple[AppliedDocument, ...]
    refused_by_reason: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The figures as JSON-ready fields."""
        return asdict(self)


def counter_total(metrics_text: str, name: str) -> int:
    """The sum over every label set of the Prometheus counter ``name`` in an exposition text (0 if absent)."""
    total = 0.0
    for line in metrics_text.splitlines():
        if line.startswith("#"):
            continue
        metric, _, value = line.rpartition(" ")
        if metric == name or metric.startswith(name + "{"):
            total += float(value)
    return round(total)


def applied_documents(log_lines: Iterable[str]) -> tuple[AppliedDocument, ...]:
    """The documents a gateway's JSON log says it applied, in the order it applied them."""
    applied: list[AppliedDocument] = []
    for line in log_lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("event") == "policy_applied":
            applied.append(
                AppliedDocument(kind=str(record["kind"]), scope=str(record["scope"]), version=int(record["version"]))
            )
    return tuple(applied)


def _served(outcome: Outcome) -> tuple[float, float, int]:
    """TTFT, end-to-end time and output tokens of a served request.

    Raises:
        ValueError: the request was not served (refused outcomes carry no latencies).
    """
    if outcome.ttft_s is None or outcome.e2e_s is None or outcome.tokens is None:
        msg = f"request {outcome.index} was not served (status {outcome.status})"
        raise ValueError(msg)
    return outcome.ttft_s, outcome.e2e_s, outcome.tokens


def _tpot_s(outcome: Outcome) -> float:
    ttft_s, e2e_s, tokens = _served(outcome)
    return (e2e_s - ttft_s) / max(1, tokens - 1)


def _rank_load(outcome: Outcome, at_s: np.ndarray) -> np.ndarray:
    """The request's load on its rank at each instant of ``at_s`` (zero outside its time in flight)."""
    ttft_s, e2e_s, tokens = _served(outcome)
    since = at_s - outcome.sent_s
    streaming_s = e2e_s - ttft_s
    done = np.clip((since - ttft_s) / streaming_s, 0.0, 1.0) if streaming_s > 0 else (since >= ttft_s)
    load = outcome.prompt_words + tokens * done
    return np.where((since >= 0) & (since < e2e_s), load, 0.0)


def rank_imbalance(
    outcomes: Sequence[Outcome], ranks: Sequence[str], sample_s: float = SAMPLE_S
) -> tuple[float, float] | None:
    """Mean and p90 of (max - mean) / mean of the ``ranks``' loads while some is loaded; None if never."""
    served = [o for o in outcomes if o.status == 200 and o.e2e_s is not None]
    if not served or len(ranks) < 2:
        return None
    end_s = max(o.sent_s + (o.e2e_s or 0.0) for o in served)
    at_s = np.arange(0.0, end_s, sample_s)
    loads = np.zeros((len(ranks), at_s.size))
    row = {rank: index for index, rank in enumerate(ranks)}
    for outcome in served:
        if outcome.upstream is not None and outcome.upstream in row:
            loads[row[outcome.upstream]] += _rank_load(outcome, at_s)
    mean = loads.mean(axis=0)
    busy = mean > 0
    if not busy.any():
        return None
    imbalance = (loads[:, busy].max(axis=0) - mean[busy]) / mean[busy]
    return float(imbalance.mean()), float(np.percentile(imbalance, 90))


def summarise(
    name: str,
    outcomes: Sequence[Outcome],
    *,
    ranks: Sequence[str],
    metrics_before: str,
    metrics_after: str,
    log_lines: Iterable[str],
) -> ArmSummary:
    """One run's figures from its outcomes, the gateway's ``/metrics`` before and after it, and its log.

    Throughput is output tokens over the makespan (first send to last end). Shed and compressed counts are
    the growth over the run of the gateway's own counters (``governor_gateway_shed_total``,
    ``governor_gateway_compressed_total``), so a warm-up before it does not count.
    """
    served = [o for o in outcomes if o.status == 200]
    ends = [o.sent_s + (o.e2e_s or 0.0) for o in served]
    makespan_s = max(ends) - min(o.sent_s for o in outcomes) if ends else 0.0
    tokens = sum(o.tokens or 0 for o in served)

    def percentile(values: list[float], q: float) -> float | None:
        return float(np.percentile(values, q) * 1e3) if values else None

    ttft = [o.ttft_s for o in served if o.ttft_s is not None]
    tpot = [_tpot_s(o) for o in served]
    per_upstream: dict[str, int] = {}
    for outcome in served:
        key = outcome.upstream or "unknown"
        per_upstream[key] = per_upstream.get(key, 0) + 1
    imbalance = rank_imbalance(outcomes, ranks)
    refused_by_reason: dict[str, int] = {}
    for outcome in outcomes:
        if outcome.status != 200:
            reason = outcome.shed_reason or f"status-{outcome.status}"
            refused_by_reason[reason] = refused_by_reason.get(reason, 0) + 1

    def growth(counter: str) -> int:
        return counter_total(metrics_after, counter) - counter_total(metrics_before, counter)

    return ArmSummary(
        name=name,
        requests=len(outcomes),
        served=len(served),
        refused=len(outcomes) - len(served),
        ttft_p50_ms=percentile(ttft, 50),
        ttft_p99_ms=percentile(ttft, 99),
        tpot_p50_ms=percentile(tpot, 50),
        tpot_p99_ms=percentile(tpot, 99),
        output_tokens_per_s=tokens / makespan_s if makespan_s > 0 else 0.0,
        makespan_s=makespan_s,
        requests_per_upstream=dict(sorted(per_upstream.items())),
        rank_imbalance_mean=None if imbalance is None else imbalance[0],
        rank_imbalance_p90=None if imbalance is None else imbalance[1],
        shed=growth("governor_gateway_shed_total"),
        compressed=growth("governor_gateway_compressed_total"),
        applied=applied_documents(log_lines),
        refused_by_reason=dict(sorted(refused_by_reason.items())),
    )


def applied_by_scope(applied: Sequence[AppliedDocument]) -> list[str]:
    """Per kind and scope, the versions applied: ``bfio fleet-dp v9-v29 (14 versions)``, in first-use order."""
    versions: dict[tuple[str, str], list[int]] = {}
    for document in applied:
        versions.setdefault((document.kind, document.scope), []).append(document.version)
    shown = []
    for (kind, scope), seen in versions.items():
        span = f"v{seen[0]}" if len(seen) == 1 else f"v{min(seen)}-v{max(seen)} ({len(seen)} versions)"
        shown.append(f"{kind} {scope} {span}")
    return shown


def _figure(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def comparison_table(governed: ArmSummary, ungoverned: ArmSummary, *, documents: bool = True) -> str:
    """The two runs side by side, one figure per line, then (with ``documents``) what each gateway applied."""
    rows: list[tuple[str, Callable[[ArmSummary], str]]] = [
        ("requests served / refused", lambda a: f"{a.served} / {a.refused}"),
        ("TTFT p50 ms", lambda a: _figure(a.ttft_p50_ms)),
        ("TTFT p99 ms", lambda a: _figure(a.ttft_p99_ms)),
        ("TPOT p50 ms", lambda a: _figure(a.tpot_p50_ms, 1)),
        ("TPOT p99 ms", lambda a: _figure(a.tpot_p99_ms, 1)),
        ("output tokens/s", lambda a: _figure(a.output_tokens_per_s, 1)),
        ("makespan s", lambda a: _figure(a.makespan_s, 1)),
        ("DP rank imbalance mean", lambda a: _figure(a.rank_imbalance_mean, 2)),
        ("DP rank imbalance p90", lambda a: _figure(a.rank_imbalance_p90, 2)),
        ("shed (429)", lambda a: str(a.shed)),
        ("refused by reason", lambda a: " ".join(f"{k}={v}" for k, v in a.refused_by_reason.items()) or "-"),
        ("compressed", lambda a: str(a.compressed)),
        ("requests per upstream", lambda a: " ".join(f"{k}={v}" for k, v in a.requests_per_upstream.items())),
    ]
    width = max(len(label) for label, _ in rows)
    lines = [f"{'':{width}}  {governed.name:>24}  {ungoverned.name:>24}"]
    lines += [f"{label:{width}}  {show(governed):>24}  {show(ungoverned):>24}" for label, show in rows]
    for arm in (governed, ungoverned) if documents else ():
        applied = "; ".join(applied_by_scope(arm.applied)) or "none"
        lines.append(f"documents the {arm.name} gateway applied: {applied}")
    return "\n".join(lines)


SPREAD_FIGURES: tuple[tuple[str, Callable[[ArmSummary], float | None], int], ...] = (
    ("TTFT p50 ms", lambda a: a.ttft_p50_ms, 0),
    ("TTFT p99 ms", lambda a: a.ttft_p99_ms, 0),
    ("TPOT p50 ms", lambda a: a.tpot_p50_ms, 1),
    ("TPOT p99 ms", lambda a: a.tpot_p99_ms, 1),
    ("output tokens/s", lambda a: a.output_tokens_per_s, 1),
    ("DP rank imbalance mean", lambda a: a.rank_imbalance_mean, 2),
    ("served", lambda a: float(a.served), 0),
    ("refused (429)", lambda a: float(a.refused), 0),
)


def spread(values: Sequence[float | None]) -> tuple[float, float, float] | None:
    """Median, min and max of the values that exist; None when none does."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    return float(np.median(present)), min(present), max(present)


def spread_table(arms: Sequence[Sequence[ArmSummary]], names: Sequence[str]) -> str:
    """Each figure's median [min, max] over the seeds, one column per arm (``arms[i]``: arm i's summaries)."""

    def cell(summaries: Sequence[ArmSummary], figure: Callable[[ArmSummary], float | None], digits: int) -> str:
        found = spread([figure(s) for s in summaries])
        if found is None:
            return "-"
        median, low, high = found
        return f"{median:,.{digits}f} [{low:,.{digits}f}, {high:,.{digits}f}]"

    width = max(len(label) for label, _, _ in SPREAD_FIGURES)
    lines = [f"{'':{width}}  " + "  ".join(f"{name:>30}" for name in names)]
    for label, figure, digits in SPREAD_FIGURES:
        lines.append(f"{label:{width}}  " + "  ".join(f"{cell(a, figure, digits):>30}" for a in arms))
    return "\n".join(lines)
