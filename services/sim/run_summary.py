"""Run metrics a user reads: throughput, TTFT and TBT per tier, SLO attainment, KV use, preemptions,
DP barrier idle and imbalance (specs/seed-003-bfio.md section 1.4, Eq. 2), and a JSON summary.

``MetricsRecorder`` is fed by the engines at the points they emit telemetry (cheap appends); the
caller turns it into a ``RunSummary`` once the run ends.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from services.sim.request import RequestSpec, SimRequest


@dataclass(frozen=True, slots=True, kw_only=True)
class TierSummary:
    """Latency of one tier's finished requests (seconds) and its TBT SLO attainment (0..1)."""

    tier: str
    finished: int
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    tbt_p50_s: float | None
    tbt_p99_s: float | None
    tbt_slo_s: float | None
    slo_attainment_frac: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class TimelineSample:
    """One simulated second of the fleet."""

    t_s: float
    finished_per_s: float
    tokens_per_s: float
    kv_use_frac: float
    running: int
    waiting: int


@dataclass(frozen=True, slots=True, kw_only=True)
class TierTimelineSample:
    """One tier over one window of simulated time: the requests that finished in it.

    ``tbt_p99_s`` is the P99 over those requests' token gaps and ``slo_attainment_frac`` the share
    of them meeting the tier's SLO (as ``RunSummary``); both None when none finished.
    """

    t_s: float
    tier: str
    finished: int
    ttft_p99_s: float | None
    tbt_p99_s: float | None
    slo_attainment_frac: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSummary:
    """What a run produced; ``to_dict`` is the JSON summary.

    ``slo_attainment_frac`` counts a finished request as meeting its SLO when its P99 token gap is
    within its tier's ``tbt_slo_s``. ``barrier_idle_frac`` is the time-based idle share of DP ranks
    at the step barrier; ``avg_imbalance_tokens`` is Eq. 2 averaged per step.
    """

    duration_s: float
    arrived: int
    finished: int
    rejected: int
    in_flight: int
    preemptions: int
    throughput_req_per_s: float
    throughput_tokens_per_s: float
    output_tokens_per_s: float
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    kv_use_mean_frac: float
    kv_use_max_frac: float
    barrier_idle_frac: float | None
    avg_imbalance_tokens: float | None
    steps: int
    tiers: tuple[TierSummary, ...]
    rejection_reasons: dict[str, int] = field(default_factory=dict)
    timeline: tuple[TimelineSample, ...] = ()
    tier_timeline: tuple[TierTimelineSample, ...] = ()

    def to_dict(self) -> dict[str, object]:
        """JSON-compatible form (``format_version`` 1)."""
        body = asdict(self)
        return {"format_version": 1, **body}


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    return float(np.quantile(np.asarray(values, dtype=np.float64), q))


def _meets_slo(gaps_s: list[float], tbt_slo_s: float | None) -> bool:
    if tbt_slo_s is None or not gaps_s:
        return True
    p99 = _quantile(gaps_s, 0.99)
    return p99 is not None and p99 <= tbt_slo_s


class MetricsRecorder:
    """Collects per-request and per-step facts during a run (append-only, cheap)."""

    def __init__(self) -> None:
        self.arrivals = 0
        self.preemptions = 0
        self.rejections: list[tuple[str, str, str]] = []
        self.finishes: list[tuple[str, float, float | None, list[float], float | None, int, int]] = []
        self.finish_engines: list[str] = []  # the engine of each entry of ``finishes``, in the same order
        self.step_samples: list[tuple[str, float, float, int, float, int, int]] = []
        self.rank_samples: list[tuple[float, float, float]] = []
        self.kv_latest: dict[str, tuple[float, int, int]] = {}

    def arrived(self, engine_id: str, spec: RequestSpec) -> None:
        """Count an arrival."""
        del engine_id, spec
        self.arrivals += 1

    def rejected(self, engine_id: str, spec: RequestSpec, reason: str) -> None:
        """Record a request the engine could never serve, with the reason."""
        self.rejections.append((engine_id, spec.request_id, reason))

    def preempted(self, engine_id: str) -> None:
        """Count a recompute preemption."""
        del engine_id
        self.preemptions += 1

    def finished(self, engine_id: str, request: SimRequest, now_s: float, reason: str) -> None:
        """Record a finished request's engine, tier, TTFT, token gaps and prompt/output tokens."""
        del reason
        self.finish_engines.append(engine_id)
        spec = request.spec
        ttft = None if request.first_token_s is None else request.first_token_s - spec.arrival_s
        self.finishes.append(
            (spec.tier, now_s, ttft, request.gaps_s, spec.tbt_slo_s, spec.prompt_tokens, request.generated_tokens)
        )

    def step(
        self,
        engine_id: str,
        now_s: float,
        *,
        duration_s: float,
        tokens: int,
        kv_use_frac: float,
        num_running: int,
        num_waiting: int,
    ) -> None:
        """Record one iteration (its computed tokens, KV use and queue sizes after it)."""
        self.step_samples.append((engine_id, now_s, duration_s, tokens, kv_use_frac, num_running, num_waiting))

    def rank_step(self, *, imbalance_tokens: float, idle_s: float, capacity_s: float) -> None:
        """Record one DP step: Eq. 2 imbalance, summed rank idle time at the barrier, G * step time."""
        self.rank_samples.append((imbalance_tokens, idle_s, capacity_s))

    def slo_met_by_engine(self, tier: str) -> dict[str, tuple[int, int]]:
        """Per engine: finished requests of ``tier`` and how many met its SLO (the summary's per-request rule)."""
        counts: dict[str, tuple[int, int]] = {}
        for engine_id, record in zip(self.finish_engines, self.finishes, strict=True):
            if record[0] == tier:
                finished, met = counts.get(engine_id, (0, 0))
                counts[engine_id] = (finished + 1, met + _meets_slo(record[3], record[4]))
        return counts

    def summarize(
        self, duration_s: float, *, timeline_step_s: float = 1.0, tier_timeline_step_s: float = 5.0
    ) -> RunSummary:
        """Turn the records into a ``RunSummary`` over ``duration_s`` simulated seconds.

        The tier timeline uses wider windows than the fleet's (5 s by default), so that a tail
        percentile of a small tier (the paid 20% of the demo) rests on enough finished requests.
        """
        span = max(duration_s, 1e-9)
        ttfts = [f[2] for f in self.finishes if f[2] is not None]
        tiers: dict[str, list[tuple[str, float, float | None, list[float], float | None, int, int]]] = {}
        for record in self.finishes:
            tiers.setdefault(record[0], []).append(record)
        tier_summaries = []
        met_total = 0
        for name in sorted(tiers):
            records = tiers[name]
            gaps = [gap for r in records for gap in r[3]]
            slo = records[0][4]
            met = sum(1 for r in records if _meets_slo(r[3], r[4]))
            met_total += met
            tier_summaries.append(
                TierSummary(
                    tier=name,
                    finished=len(records),
                    ttft_p50_s=_quantile([r[2] for r in records if r[2] is not None], 0.5),
                    ttft_p99_s=_quantile([r[2] for r in records if r[2] is not None], 0.99),
                    tbt_p50_s=_quantile(gaps, 0.5),
                    tbt_p99_s=_quantile(gaps, 0.99),
                    tbt_slo_s=slo,
                    slo_attainment_frac=met / len(records) if records else None,
                )
            )
        kv = [s[4] for s in self.step_samples]
        out_tokens = sum(f[6] for f in self.finishes)
        computed_tokens = sum(s[3] for s in self.step_samples)
        reasons: dict[str, int] = {}
        for _, _, reason in self.rejections:
            key = reason.split(" exceeds ")[-1] if " exceeds " in reason else reason
            reasons[key] = reasons.get(key, 0) + 1
        idle = sum(r[1] for r in self.rank_samples)
        capacity = sum(r[2] for r in self.rank_samples)
        finished = len(self.finishes)
        return RunSummary(
            duration_s=duration_s,
            arrived=self.arrivals,
            finished=finished,
            rejected=len(self.rejections),
            in_flight=self.arrivals - finished - len(self.rejections),
            preemptions=self.preemptions,
            throughput_req_per_s=finished / span,
            throughput_tokens_per_s=computed_tokens / span,
            output_tokens_per_s=out_tokens / span,
            ttft_p50_s=_quantile(ttfts, 0.5),
            ttft_p99_s=_quantile(ttfts, 0.99),
            kv_use_mean_frac=float(np.mean(kv)) if kv else 0.0,
            kv_use_max_frac=max(kv) if kv else 0.0,
            barrier_idle_frac=idle / capacity if capacity > 0 else None,
            avg_imbalance_tokens=float(np.mean([r[0] for r in self.rank_samples])) if self.rank_samples else None,
            steps=len(self.step_samples),
            tiers=tuple(tier_summaries),
            rejection_reasons=reasons,
            timeline=self.timeline(duration_s, timeline_step_s),
            tier_timeline=self.tier_timeline(duration_s, tier_timeline_step_s),
        )

    def tier_timeline(self, duration_s: float, step_s: float = 5.0) -> tuple[TierTimelineSample, ...]:
        """Per tier and window: finished requests, their TTFT P99, TBT P99 and SLO attainment."""
        bins = max(1, int(np.ceil(duration_s / step_s)))
        grouped: dict[tuple[str, int], list[tuple[float | None, list[float], float | None]]] = {}
        for tier, finished_s, ttft_s, gaps_s, slo_s, _, _ in self.finishes:
            window = min(bins - 1, int(finished_s / step_s))
            grouped.setdefault((tier, window), []).append((ttft_s, gaps_s, slo_s))
        samples = []
        for tier in sorted({key[0] for key in grouped}):
            for window in range(bins):
                records = grouped.get((tier, window), [])
                samples.append(
                    TierTimelineSample(
                        t_s=(window + 1) * step_s,
                        tier=tier,
                        finished=len(records),
                        ttft_p99_s=_quantile([r[0] for r in records if r[0] is not None], 0.99),
                        tbt_p99_s=_quantile([gap for r in records for gap in r[1]], 0.99),
                        slo_attainment_frac=sum(1 for r in records if _meets_slo(r[1], r[2])) / len(records)
                        if records
                        else None,
                    )
                )
        return tuple(samples)

    def timeline(self, duration_s: float, step_s: float = 1.0) -> tuple[TimelineSample, ...]:
        """Per-interval throughput, KV use and queue sizes (fleet totals; KV and queues at interval end)."""
        bins = max(1, int(np.ceil(duration_s / step_s)))
        finished = np.zeros(bins)
        tokens = np.zeros(bins)
        for record in self.finishes:
            finished[min(bins - 1, int(record[1] / step_s))] += 1
        latest: dict[str, tuple[float, int, int]] = {}
        kv_frac = np.zeros(bins)
        running = np.zeros(bins, dtype=np.int64)
        waiting = np.zeros(bins, dtype=np.int64)
        samples = sorted(self.step_samples, key=lambda s: s[1])
        index = 0
        for b in range(bins):
            end = (b + 1) * step_s
            while index < len(samples) and samples[index][1] <= end:
                engine_id, _, _, n_tok, frac, run, wait = samples[index]
                tokens[b] += n_tok
                latest[engine_id] = (frac, run, wait)
                index += 1
            if latest:
                kv_frac[b] = float(np.mean([v[0] for v in latest.values()]))
                running[b] = sum(v[1] for v in latest.values())
                waiting[b] = sum(v[2] for v in latest.values())
        return tuple(
            TimelineSample(
                t_s=(b + 1) * step_s,
                finished_per_s=float(finished[b] / step_s),
                tokens_per_s=float(tokens[b] / step_s),
                kv_use_frac=float(kv_frac[b]),
                running=int(running[b]),
                waiting=int(waiting[b]),
            )
            for b in range(bins)
        )
