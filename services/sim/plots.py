"""PNG timeline plots of a run (matplotlib, Agg backend): throughput, KV use and queues over time."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from services.sim.metrics import RunSummary


def write_plots(summary: RunSummary, out_dir: Path, *, title: str = "") -> list[Path]:
    """Write ``timeline.png`` (throughput, KV use, queues per simulated second) and ``latency.png``
    (TTFT and TBT percentiles per tier) into ``out_dir``; return their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    t = [s.t_s for s in summary.timeline]
    fig, axes = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    axes[0].plot(t, [s.tokens_per_s for s in summary.timeline], label="tokens/s")
    axes[0].set_ylabel("tokens/s")
    twin = axes[0].twinx()
    twin.plot(t, [s.finished_per_s for s in summary.timeline], color="tab:orange", label="finished/s")
    twin.set_ylabel("finished/s")
    axes[1].plot(t, [s.kv_use_frac for s in summary.timeline], color="tab:green")
    axes[1].set_ylabel("KV use (mean frac)")
    axes[1].set_ylim(0, 1.05)
    axes[2].plot(t, [s.running for s in summary.timeline], label="running")
    axes[2].plot(t, [s.waiting for s in summary.timeline], label="waiting")
    axes[2].set_ylabel("requests")
    axes[2].set_xlabel("simulated time (s)")
    axes[2].legend(loc="upper left")
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
    ax.set_xticks(list(xs), names)
    ax.set_ylabel("seconds")
    ax.set_yscale("log")
    ax.legend()
    fig.tight_layout()
    latency = out_dir / "latency.png"
    fig.savefig(latency, dpi=90)
    plt.close(fig)
    return [timeline, latency]
