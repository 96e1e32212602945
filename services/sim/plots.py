"""PNG plots of a run and of a comparison (matplotlib, Agg backend).

One run (``write_plots``): ``timeline.png`` (throughput, KV use, queues, each tier's P99 token gap
against its SLO line, and a row of ticks per policy kind where an engine applied a new version) and
``latency.png`` (TTFT and TBT percentiles per tier with the TBT SLO drawn). A comparison
(``write_comparison_plots``): the same timeline panels with one line per arm, and per-tier bars of
SLO attainment, TTFT P99 and TBT P99 per arm. Every axis is labelled with its unit.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.axes import Axes

from services.sim.compare import Comparison, PolicyChange
from services.sim.run_summary import RunSummary

ARM_STYLES = {"baseline": ":", "ungoverned": "--", "governed": "-"}
TIER_COLOURS = ("tab:red", "tab:blue", "tab:green", "tab:purple", "tab:brown")


def _tier_colours(summaries: Sequence[RunSummary]) -> dict[str, str]:
    names = sorted({tier.tier for summary in summaries for tier in summary.tiers})
    return {name: TIER_COLOURS[i % len(TIER_COLOURS)] for i, name in enumerate(names)}


def _slo_of(summaries: Sequence[RunSummary]) -> dict[str, float]:
    return {t.tier: t.tbt_slo_s for s in summaries for t in s.tiers if t.tbt_slo_s is not None}


def _tbt_panel(ax: Axes, runs: Sequence[tuple[str, RunSummary]], colours: dict[str, str]) -> None:
    """Each tier's P99 token gap per window (one line style per run) and its SLO as a horizontal line."""
    for name, summary in runs:
        for tier in sorted({s.tier for s in summary.tier_timeline}):
            points = [(s.t_s, s.tbt_p99_s) for s in summary.tier_timeline if s.tier == tier and s.tbt_p99_s is not None]
            if points:
                label = tier if len(runs) == 1 else f"{tier} {name}"
                ax.plot(
                    [p[0] for p in points],
                    [p[1] * 1e3 for p in points],
                    ARM_STYLES.get(name, "-"),
                    color=colours[tier],
                    label=label,
                    marker=".",
                )
    for tier, slo_s in sorted(_slo_of([summary for _, summary in runs]).items()):
        ax.axhline(slo_s * 1e3, color=colours[tier], linewidth=1.0, alpha=0.6, label=f"{tier} TBT SLO")
    ax.set_ylabel("TBT p99 per window (ms)")
    ax.set_yscale("log")
    ax.legend(loc="upper left", fontsize=7, ncol=2)


def _changes_panel(ax: Axes, changes: Sequence[PolicyChange], duration_s: float) -> None:
    """One row per policy kind, a tick wherever an engine applied a new version of it."""
    kinds = sorted({change.kind for change in changes})
    for row, kind in enumerate(kinds):
        times = [change.t_s for change in changes if change.kind == kind]
        ax.vlines(times, row - 0.35, row + 0.35, linewidth=0.8)
    ax.set_yticks(range(len(kinds)), kinds)
    ax.set_ylim(-0.6, max(0.6, len(kinds) - 0.4))
    ax.set_xlim(0.0, duration_s)
    ax.set_ylabel("policy applied")
    if not kinds:
        ax.text(0.5, 0.5, "no policy applied (ungoverned)", ha="center", va="center", transform=ax.transAxes)


def write_plots(
    summary: RunSummary, out_dir: Path, *, title: str = "", policy_changes: Sequence[PolicyChange] = ()
) -> list[Path]:
    """Write ``timeline.png`` and ``latency.png`` of one run into ``out_dir``; return their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    t = [s.t_s for s in summary.timeline]
    colours = _tier_colours([summary])
    fig, axes = plt.subplots(5, 1, figsize=(10, 12), sharex=True, height_ratios=(3, 2, 2, 3, 1.5))
    axes[0].plot(t, [s.tokens_per_s for s in summary.timeline], label="tokens/s")
    axes[0].set_ylabel("computed tokens/s")
    twin = axes[0].twinx()
    twin.plot(t, [s.finished_per_s for s in summary.timeline], color="tab:orange", label="finished/s")
    twin.set_ylabel("finished requests/s")
    axes[1].plot(t, [s.kv_use_frac for s in summary.timeline], color="tab:green")
    axes[1].set_ylabel("KV use (mean frac)")
    axes[1].set_ylim(0, 1.05)
    axes[2].plot(t, [s.running for s in summary.timeline], label="running")
    axes[2].plot(t, [s.waiting for s in summary.timeline], label="waiting")
    axes[2].set_ylabel("requests")
    axes[2].legend(loc="upper left")
    _tbt_panel(axes[3], [("run", summary)], colours)
    _changes_panel(axes[4], policy_changes, summary.duration_s)
    axes[4].set_xlabel("simulated time (s)")
    fig.suptitle(title or "simulated fleet")
    fig.tight_layout()
    timeline = out_dir / "timeline.png"
    fig.savefig(timeline, dpi=90)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(7, 4))
    names = [tier.tier for tier in summary.tiers]
    xs = range(len(names))
    ax.bar([x - 0.3 for x in xs], [tier.ttft_p50_s or 0.0 for tier in summary.tiers], 0.2, label="TTFT p50")
    ax.bar([x - 0.1 for x in xs], [tier.ttft_p99_s or 0.0 for tier in summary.tiers], 0.2, label="TTFT p99")
    ax.bar([x + 0.1 for x in xs], [tier.tbt_p50_s or 0.0 for tier in summary.tiers], 0.2, label="TBT p50")
    ax.bar([x + 0.3 for x in xs], [tier.tbt_p99_s or 0.0 for tier in summary.tiers], 0.2, label="TBT p99")
    for x, tier in zip(xs, summary.tiers, strict=True):
        if tier.tbt_slo_s is not None:
            ax.hlines(tier.tbt_slo_s, x, x + 0.4, colors="black", linestyles="--")
    ax.plot([], [], "k--", label="TBT SLO")
    ax.set_xticks(list(xs), names)
    ax.set_xlabel("tier")
    ax.set_ylabel("seconds")
    ax.set_yscale("log")
    ax.legend(fontsize=8)
    fig.tight_layout()
    latency = out_dir / "latency.png"
    fig.savefig(latency, dpi=90)
    plt.close(fig)
    return [timeline, latency]


def write_comparison_plots(comparison: Comparison, out_dir: Path, *, title: str = "") -> list[Path]:
    """Write ``compare_timeline.png`` and ``compare_tiers.png`` of a comparison; return their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    runs = [(arm.name, arm.summary) for arm in comparison.arms]
    colours = _tier_colours([summary for _, summary in runs])
    governed = next(arm for arm in comparison.arms if arm.name == "governed")
    fig, axes = plt.subplots(4, 1, figsize=(10, 11), sharex=True, height_ratios=(3, 2, 3, 1.5))
    for name, summary in runs:
        t = [s.t_s for s in summary.timeline]
        style = ARM_STYLES.get(name, "-")
        axes[0].plot(t, [s.finished_per_s for s in summary.timeline], style, label=name)
        axes[1].plot(t, [s.kv_use_frac for s in summary.timeline], style, label=name)
    axes[0].set_ylabel("finished requests/s")
    axes[0].legend(loc="upper left")
    axes[1].set_ylabel("KV use (mean frac)")
    axes[1].set_ylim(0, 1.05)
    axes[1].legend(loc="upper left")
    _tbt_panel(axes[2], runs, colours)
    _changes_panel(axes[3], governed.policy_changes, governed.summary.duration_s)
    axes[3].set_ylabel("governed:\npolicy applied")
    axes[3].set_xlabel("simulated time (s)")
    fig.suptitle(title or f"{comparison.scenario}, seed {comparison.seed}: governed vs ungoverned")
    fig.tight_layout()
    timeline = out_dir / "compare_timeline.png"
    fig.savefig(timeline, dpi=90)
    plt.close(fig)
    tiers = sorted({tier.tier for _, summary in runs for tier in summary.tiers})
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    width = 0.8 / len(runs)
    panels = (
        ("slo_attainment_frac", "SLO attainment (frac of requests)", 1.0),
        ("ttft_p99_s", "TTFT p99 (s)", 1.0),
        ("tbt_p99_s", "TBT p99 (ms)", 1e3),
    )
    for ax, (attribute, label, scale) in zip(axes, panels, strict=True):
        for i, (name, summary) in enumerate(runs):
            by_tier = {tier.tier: tier for tier in summary.tiers}
            values = [getattr(by_tier[t], attribute) if t in by_tier else None for t in tiers]
            ax.bar(
                [x - 0.4 + width * (i + 0.5) for x in range(len(tiers))],
                [0.0 if v is None else v * scale for v in values],
                width,
                label=name,
            )
        ax.set_xticks(range(len(tiers)), tiers)
        ax.set_xlabel("tier")
        ax.set_ylabel(label)
    slos = _slo_of([summary for _, summary in runs])
    for x, tier in enumerate(tiers):
        if tier in slos:
            axes[2].hlines(slos[tier] * 1e3, x - 0.4, x + 0.4, colors="black", linestyles="--")
    axes[2].plot([], [], "k--", label="TBT SLO")
    axes[0].set_ylim(0, 1.3)  # headroom above 100% for the legend
    for ax in axes:
        ax.legend(fontsize=8, loc="upper right")
    fig.suptitle(comparison.verdict(), fontsize=7, wrap=True)
    fig.tight_layout()
    bars = out_dir / "compare_tiers.png"
    fig.savefig(bars, dpi=90)
    plt.close(fig)
    return [timeline, bars]
