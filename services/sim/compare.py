"""Governed vs ungoverned on one workload and seed: the arms of a comparison, their deltas and a verdict.

A user's first question is what Governor buys. ``governor sim --compare`` and ``governor demo --compare``
answer it by running the same scenario (same requests: the workload is drawn from the seed before any
engine runs) in up to three arms:

- ``baseline``: every engine on its paper's baseline policy instead (``BASELINE_SCHEDULERS``: EB+ ->
  vLLM v1 mixed batching, SLAI -> Sarathi-Serve FCFS, BF-IO -> JSQ by load), no control plane;
- ``ungoverned``: the scenario's own engines with no control plane, so each runs its documented safe
  default (EB+ engines mixed batching, SLAI engines the paper's default rule, BF-IO the JSQ fallback);
- ``governed``: the same engines under Governor, offline (the in-process control plane on event
  time, ``OfflineControlPlane``) or live (the services over Kafka and Redis, services/cli/live.py).

``Comparison.rows`` holds every metric per arm (throughput, TTFT/TBT P50/P99 and SLO attainment per
tier, KV use, preemptions, GPUs), ``Comparison.verdict`` says in one line what governing bought, and
``PolicyChangeRecorder`` keeps the policy versions engines applied, for the timeline plots.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Literal

from decide.specs import default_registry
from schemas.engines import PolicyApplied
from schemas.events import Event
from schemas.policy_docs import FleetoptPolicy
from services.replay.offline import OfflineControlPlane
from services.sdk.protocol import PolicySource, StaticPolicySource, TelemetrySink
from services.sim.dp import DpConfig
from services.sim.run_summary import RunSummary
from services.sim.runner import run_offline
from services.sim.scenario import Scenario, SchedulerName

FLEET_SCOPE = "fleet"
# The papers' baselines (docs/results.md): EB seed 001 compares with vLLM v1 mixed batching, SLAI seed 000
# with Sarathi-Serve FCFS, BF-IO seed 003 with FCFS and JSQ; JSQ by load is the stronger of the two and the
# router's own fallback, so a BF-IO gain over it is not an artefact of a weak baseline.
BASELINE_SCHEDULERS: Mapping[str, SchedulerName] = {
    "ebplus": "mixed",
    "slai": "sarathi",
    "bfio": "jsq-load",
}
SLO_NOISE_PP = 1.0  # a tier's SLO attainment within 1 point of the reference is reported as unchanged


class Control(enum.StrEnum):
    """How a simulated fleet is governed."""

    NONE = "none"  # no control plane: engines run their safe defaults
    OFFLINE = "offline"  # the in-process control plane on event time (OfflineControlPlane)
    LIVE = "live"  # the stream processor and policy service over Kafka and Redis, paced in wall time


CONTROL_WORDS: Mapping[Control, str] = {
    Control.NONE: "no control plane: every engine runs its safe default policy",
    Control.OFFLINE: "governed by the in-process control plane (the services' fold and decide code on event time)",
    Control.LIVE: "governed live by the stream processor and policy service over Kafka and Redis",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyChange:
    """An engine applied a new policy version at event time ``t_s`` (its ``policy.applied`` event)."""

    t_s: float
    engine_id: str
    kind: str
    version: int


class PolicyChangeRecorder:
    """A ``TelemetrySink`` in front of another that keeps every policy version an engine applied."""

    def __init__(self, sink: TelemetrySink) -> None:
        self.sink = sink
        self.changes: list[PolicyChange] = []

    def publish(self, event: Event) -> None:
        """Note a ``policy.applied`` event, then pass every event on."""
        if isinstance(event, PolicyApplied) and event.applied:
            self.changes.append(
                PolicyChange(t_s=event.ts, engine_id=event.engine_id, kind=event.kind, version=event.version)
            )
        self.sink.publish(event)


class _Tee:
    """Publish every event to several sinks in order (the control plane and a recording list)."""

    def __init__(self, sinks: Sequence[TelemetrySink]) -> None:
        self.sinks = tuple(sinks)

    def publish(self, event: Event) -> None:
        for sink in self.sinks:
            sink.publish(event)


class _Discard:
    """A sink that keeps nothing: an arm whose events nobody reads need not hold them in memory."""

    def publish(self, event: Event) -> None:
        del event


@dataclass(frozen=True, slots=True, kw_only=True)
class Arm:
    """One run of a comparison.

    Attributes:
        name: ``baseline``, ``ungoverned`` or ``governed``.
        control: how it was governed.
        summary: its metrics.
        policy_changes: the policy versions its engines applied, in event-time order.
        fleet_gpus: GPUs in the simulated fleet (one per engine, one per DP rank).
        planned_gpus: GPUs the last FleetOpt plan would provision (n_s + n_l), or None without a plan.
    """

    name: str
    control: Control
    summary: RunSummary
    policy_changes: tuple[PolicyChange, ...] = ()
    fleet_gpus: int
    planned_gpus: int | None = None


def fleet_gpus(scenario: Scenario) -> int:
    """GPUs of the scenario's fleet: one per engine, one per rank of a DP deployment."""
    return sum(spec.config.ranks if isinstance(spec.config, DpConfig) else 1 for spec in scenario.engines)


def planned_gpus(source: PolicySource, now_s: float) -> int | None:
    """n_s + n_l of the FleetOpt plan valid at ``now_s``, or None when there is none."""
    document = source.current("fleetopt", FLEET_SCOPE, now_s)
    if not isinstance(document, FleetoptPolicy):
        return None
    return document.payload.fleet.short.n_gpus + document.payload.fleet.long.n_gpus


def baseline_scenario(scenario: Scenario) -> Scenario | None:
    """The scenario with each engine on its paper's baseline, or None when no engine has one."""
    if not any(spec.scheduler in BASELINE_SCHEDULERS for spec in scenario.engines):
        return None
    engines = tuple(
        replace(spec, scheduler=BASELINE_SCHEDULERS.get(spec.scheduler, spec.scheduler)) for spec in scenario.engines
    )
    return replace(scenario, engines=engines)


def run_offline_arm(
    scenario: Scenario, *, name: str, control: Control, record: TelemetrySink | None = None, fleet_slot_s: float
) -> Arm:
    """Run ``scenario`` on event time without control or under the in-process control plane.

    Args:
        scenario: the fleet and workload.
        name: the arm's name.
        control: ``Control.NONE`` or ``Control.OFFLINE``.
        record: a sink that also receives every event (``--record``), or None.
        fleet_slot_s: the fleet-scope slot of the control plane's FleetOpt decisions, seconds.

    Raises:
        InvalidInputError: from the scenario's engines (a scheduler breaking a limit).
        ValueError: ``Control.LIVE``, which needs the services (services/cli/live.py).
    """
    if control is Control.LIVE:
        msg = "a live arm runs through the services, not run_offline_arm"
        raise ValueError(msg)
    plane = None
    if control is Control.OFFLINE:
        plane = OfflineControlPlane(scenario.deployment, default_registry(fleet_slot_s=fleet_slot_s))
    sinks: list[TelemetrySink] = [sink for sink in (plane, record) if sink is not None]
    recorder = PolicyChangeRecorder(_Tee(sinks) if sinks else _Discard())
    summary = run_offline(scenario, sink=recorder, policy_source=StaticPolicySource() if plane is None else plane)
    return Arm(
        name=name,
        control=control,
        summary=summary,
        policy_changes=tuple(recorder.changes),
        fleet_gpus=fleet_gpus(scenario),
        planned_gpus=None if plane is None else planned_gpus(plane, scenario.duration_s),
    )


def compare_arms(scenario: Scenario, *, main: Arm, fleet_slot_s: float) -> list[Arm]:
    """The arms of a comparison around ``main`` (an ``ungoverned`` or ``governed`` run of ``scenario``).

    Runs offline what ``main`` is not: the papers' baselines (when a paper has one), the ungoverned
    fleet, and the governed fleet under the in-process control plane. Returns the arms in the order
    baseline, ungoverned, governed.
    """
    arms = []
    baseline = baseline_scenario(scenario)
    if baseline is not None:
        arms.append(run_offline_arm(baseline, name="baseline", control=Control.NONE, fleet_slot_s=fleet_slot_s))
    if main.name == "ungoverned":
        arms.append(main)
    else:
        arms.append(run_offline_arm(scenario, name="ungoverned", control=Control.NONE, fleet_slot_s=fleet_slot_s))
    if main.name == "governed":
        arms.append(main)
    else:
        arms.append(run_offline_arm(scenario, name="governed", control=Control.OFFLINE, fleet_slot_s=fleet_slot_s))
    return arms


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricRow:
    """One metric across the arms of a comparison.

    Attributes:
        metric: what is measured, with its tier where it has one (``TBT p99 paid``).
        unit: ``req/s``, ``tok/s``, ``s``, ``frac`` (0..1), ``count`` or ``GPUs``.
        better: which direction is an improvement (``none``: neither, e.g. KV use).
        values: one value per arm, in the comparison's arm order (None: not measured in that arm).
    """

    metric: str
    unit: str
    better: Literal["higher", "lower", "none"]
    values: tuple[float | None, ...]


def _tier_rows(arms: Sequence[Arm]) -> list[MetricRow]:
    tiers = sorted({tier.tier for arm in arms for tier in arm.summary.tiers})
    rows: list[MetricRow] = []
    fields: tuple[tuple[str, str, str], ...] = (
        ("TTFT p50", "ttft_p50_s", "s"),
        ("TTFT p99", "ttft_p99_s", "s"),
        ("TBT p50", "tbt_p50_s", "s"),
        ("TBT p99", "tbt_p99_s", "s"),
        ("SLO attainment", "slo_attainment_frac", "frac"),
    )
    for tier in tiers:
        by_arm = [{t.tier: t for t in arm.summary.tiers}.get(tier) for arm in arms]
        for label, attribute, unit in fields:
            values = tuple(None if t is None else getattr(t, attribute) for t in by_arm)
            rows.append(
                MetricRow(
                    metric=f"{label} {tier}",
                    unit=unit,
                    better="higher" if unit == "frac" else "lower",
                    values=values,
                )
            )
    return rows


def comparison_rows(arms: Sequence[Arm]) -> tuple[MetricRow, ...]:
    """Every compared metric across ``arms``: fleet throughput and latency, per-tier rows, KV, preemptions, GPUs."""

    def row(
        metric: str, unit: str, better: Literal["higher", "lower", "none"], value: Callable[[Arm], float | None]
    ) -> MetricRow:
        return MetricRow(metric=metric, unit=unit, better=better, values=tuple(value(arm) for arm in arms))

    rows = [
        row("finished", "count", "higher", lambda a: float(a.summary.finished)),
        row("throughput", "req/s", "higher", lambda a: a.summary.throughput_req_per_s),
        row("output tokens", "tok/s", "higher", lambda a: a.summary.output_tokens_per_s),
        row("TTFT p50", "s", "lower", lambda a: a.summary.ttft_p50_s),
        row("TTFT p99", "s", "lower", lambda a: a.summary.ttft_p99_s),
        *_tier_rows(arms),
        row("KV use mean", "frac", "none", lambda a: a.summary.kv_use_mean_frac),
        row("preemptions", "count", "lower", lambda a: float(a.summary.preemptions)),
        row("fleet GPUs", "GPUs", "none", lambda a: float(a.fleet_gpus)),
        row(
            "FleetOpt plan GPUs",
            "GPUs",
            "none",
            lambda a: None if a.planned_gpus is None else float(a.planned_gpus),
        ),
    ]
    if any(arm.summary.avg_imbalance_tokens is not None for arm in arms):
        rows.append(row("DP imbalance", "tokens", "lower", lambda a: a.summary.avg_imbalance_tokens))
    return tuple(rows)


def _format_value(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "frac":
        return f"{value:.1%}"
    if unit == "s":
        return f"{value * 1e3:.1f} ms" if value < 1.0 else f"{value:.2f} s"
    if unit in ("count", "GPUs", "tokens"):
        return f"{value:,.0f}"
    return f"{value:,.2f} {unit}"


def _format_delta(subject: float | None, reference: float | None, unit: str) -> str:
    if subject is None or reference is None:
        return "-"
    if unit == "frac":
        return f"{(subject - reference) * 100:+.1f} pp"
    if reference == 0.0:
        return "0" if subject == 0.0 else f"{subject - reference:+,.0f}"
    return f"{(subject - reference) / abs(reference):+.1%}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Comparison:
    """Arms of one scenario and seed, the metric rows across them and the verdict.

    ``subject`` is the governed arm; ``reference`` the ungoverned one (the same engines without
    control), which the verdict compares against.
    """

    scenario: str
    seed: int
    arms: tuple[Arm, ...]
    rows: tuple[MetricRow, ...]

    @classmethod
    def of(cls, scenario: Scenario, arms: Sequence[Arm]) -> Comparison:
        """Build the comparison of ``arms`` (which must include ``ungoverned`` and ``governed``).

        Raises:
            ValueError: an arm is missing.
        """
        names = [arm.name for arm in arms]
        if "ungoverned" not in names or "governed" not in names:
            msg = f"a comparison needs an ungoverned and a governed arm, got {names}"
            raise ValueError(msg)
        return cls(scenario=scenario.name, seed=scenario.seed, arms=tuple(arms), rows=comparison_rows(arms))

    def _index(self, name: str) -> int:
        return [arm.name for arm in self.arms].index(name)

    def table(self) -> str:
        """The console table: one line per metric, a column per arm and the governed arm's deltas."""
        subject = self._index("governed")
        references = [i for i, arm in enumerate(self.arms) if arm.name != "governed"]
        header = ["metric", *(arm.name for arm in self.arms), *(f"vs {self.arms[i].name}" for i in references)]
        lines = [header]
        for row in self.rows:
            cells = [row.metric, *(_format_value(v, row.unit) for v in row.values)]
            cells.extend(_format_delta(row.values[subject], row.values[i], row.unit) for i in references)
            lines.append(cells)
        widths = [max(len(line[c]) for line in lines) for c in range(len(header))]
        return "\n".join(
            "  ".join(cell.ljust(widths[c]) if c == 0 else cell.rjust(widths[c]) for c, cell in enumerate(line))
            for line in lines
        )

    def worse_tiers(self) -> tuple[str, ...]:
        """Tiers whose SLO attainment under control is more than ``SLO_NOISE_PP`` points below ungoverned."""
        subject, reference = self._index("governed"), self._index("ungoverned")
        worse = []
        for row in self.rows:
            if not row.metric.startswith("SLO attainment "):
                continue
            governed, ungoverned = row.values[subject], row.values[reference]
            if governed is not None and ungoverned is not None and (ungoverned - governed) * 100 > SLO_NOISE_PP:
                worse.append(row.metric.removeprefix("SLO attainment "))
        return tuple(worse)

    def verdict(self) -> str:
        """One line: what governing bought on this run against the ungoverned arm, worse tiers named."""
        subject, reference = self._index("governed"), self._index("ungoverned")
        by_name = {row.metric: row for row in self.rows}
        parts = []
        for metric in ("throughput", "TTFT p99"):
            row = by_name[metric]
            governed, ungoverned = row.values[subject], row.values[reference]
            if governed is not None and ungoverned is not None:
                parts.append(
                    f"{metric} {_format_delta(governed, ungoverned, row.unit)} "
                    f"({_format_value(governed, row.unit)} vs {_format_value(ungoverned, row.unit)})"
                )
        slo = []
        for row in self.rows:
            if row.metric.startswith("SLO attainment "):
                governed, ungoverned = row.values[subject], row.values[reference]
                slo.append(
                    f"{row.metric.removeprefix('SLO attainment ')} {_format_value(governed, row.unit)} vs "
                    f"{_format_value(ungoverned, row.unit)}"
                )
        if slo:
            parts.append("SLO attainment " + ", ".join(slo))
        worse = self.worse_tiers()
        tail = f"; worse under control: {', '.join(worse)}" if worse else "; no tier worse off"
        return f"Governing bought on this run (seed {self.seed}, governed vs ungoverned): " + "; ".join(parts) + tail

    def to_dict(self) -> dict[str, object]:
        """JSON-compatible form for summary.json (``format_version`` 1): arms, rows, verdict."""
        return {
            "format_version": 1,
            "scenario": self.scenario,
            "seed": self.seed,
            "verdict": self.verdict(),
            "worse_tiers": list(self.worse_tiers()),
            "arms": {
                arm.name: {
                    "control": str(arm.control),
                    "fleet_gpus": arm.fleet_gpus,
                    "planned_gpus": arm.planned_gpus,
                    "policy_changes": [asdict(change) for change in arm.policy_changes],
                    "summary": arm.summary.to_dict(),
                }
                for arm in self.arms
            },
            "rows": [
                {
                    "metric": row.metric,
                    "unit": row.unit,
                    "better": row.better,
                    **{arm.name: _json_number(value) for arm, value in zip(self.arms, row.values, strict=True)},
                }
                for row in self.rows
            ],
        }


def _json_number(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else value
