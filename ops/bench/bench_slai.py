"""SLAI benchmark: a minimal discrete-event engine driving the pure batch builders (spec §5.6).

Sweeps the arrival rate for Sarathi-Serve FCFS, SLAI (SPF, fixed delta 10) and SLAI (SPF, dynamic
5/10 at 0.96) on the ShareGPT lengths shipped in services/sim/data, with a share of paid users,
and reports median TTFT (over all arrivals after the warm-up, unfinished ones censored at the
horizon), P99 TBT per tier, and the capacity at median TTFT <= 0.5 s with P99 TBT within target,
beside the paper's headline numbers. It also times one SLAI batch build. Batch times come from
the paper's timing profile (policies/slai/calibration.py). This loop is a stand-in for the
project simulator (services/sim), which will wrap the same builders.

    PYTHONPATH=. /work/venv/bin/python ops/bench/bench_slai.py --out out/bench/bench_slai.json
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from policies.slai import (
    BatchPlan,
    BuilderParams,
    EntryKind,
    KvView,
    OffsetMode,
    OffsetRule,
    PrefillOrder,
    RequestView,
    SchedulerKind,
    SchedulerQueues,
    SlaiParams,
    SlaiTimingProfile,
    build_batch,
    last_schedulable_time,
    offset_for_kv_use,
)

DATA = Path(__file__).resolve().parents[2] / "services" / "sim" / "data" / "sharegpt-lengths.csv"
PAPER = {"ttft_p50_high_load_s": {"sarathi_fcfs": 1.5, "slai_dynamic": 0.7}, "capacity_per_s": [1.15, 1.45]}


@dataclass
class Req:
    rid: str
    arrival_s: float
    prompt: int
    target_out: int
    tbt_s: float
    paid: bool
    prefill_len: int = 0
    prefilled: int = 0
    out: int = 0
    out_since_prefill: int = 0
    kv_held: int = 0
    lst_s: float = 0.0
    first_token_s: float | None = None
    last_token_s: float | None = None

    def view(self) -> RequestView:
        return RequestView(
            request_id=self.rid,
            arrival_s=self.arrival_s,
            prompt_tokens=self.prefill_len,
            prefilled_tokens=self.prefilled,
            output_tokens=self.out_since_prefill,
            tbt_slo_s=self.tbt_s,
            paid=self.paid,
            kv_blocks_held=self.kv_held,
            last_schedulable_s=self.lst_s if self.prefilled == self.prefill_len else None,
        )


@dataclass
class Variant:
    name: str
    builder: BuilderParams
    rule: OffsetRule | None


@dataclass
class Result:
    ttft_s: list[float] = field(default_factory=list)
    gaps_s: dict[str, list[float]] = field(default_factory=lambda: {"paid": [], "free": []})
    batches: int = 0
    preemptions: int = 0
    kv_use: list[float] = field(default_factory=list)


def load_lengths() -> list[tuple[int, int]]:
    with DATA.open() as f:
        return [(int(r["num_prefill_tokens"]), int(r["num_decode_tokens"])) for r in csv.DictReader(f)]


def workload(rate_per_s: float, horizon_s: float, paid_frac: float, seed: int) -> list[Req]:
    rng = np.random.default_rng(seed)
    lengths = load_lengths()
    order = rng.permutation(len(lengths))
    t, reqs = 0.0, []
    while True:
        t += float(rng.exponential(1.0 / rate_per_s))
        if t >= horizon_s:
            return reqs
        p, d = lengths[order[len(reqs) % len(order)]]
        paid = bool(rng.random() < paid_frac)
        reqs.append(
            Req(
                rid=f"r{len(reqs)}",
                arrival_s=t,
                prompt=p,
                target_out=max(1, d),
                tbt_s=0.1 if paid else 0.5,
                paid=paid,
                prefill_len=p,
            )
        )


def simulate(variant: Variant, reqs: list[Req], horizon_s: float, warmup_s: float) -> Result:
    prof = SlaiTimingProfile()
    bs = prof.block_size_tokens
    free = prof.kv_blocks_total
    by_id = {r.rid: r for r in reqs}
    pending = list(reversed(reqs))
    waiting: list[Req] = []
    paused: list[Req] = []
    decodes: dict[str, Req] = {}
    res = Result()
    now, tbar, nb = 0.0, 0.0, 0
    while now < horizon_s:
        while pending and pending[-1].arrival_s <= now:
            waiting.append(pending.pop())
        if not (waiting or paused or decodes):
            if not pending:
                break
            now = pending[-1].arrival_s
            continue
        queues = SchedulerQueues(
            decodes=tuple(r.view() for r in decodes.values()),
            paused_prefills=tuple(r.view() for r in paused),
            waiting=tuple(r.view() for r in waiting),
        )
        plan: BatchPlan = build_batch(
            now, queues, KvView(free_blocks=free, total_blocks=prof.kv_blocks_total), variant.builder
        )
        for p in plan.preempted:
            r = by_id[p.request_id]
            free += r.kv_held
            decodes.pop(r.rid, None)
            if r in paused:
                paused.remove(r)
            r.prefill_len, r.prefilled, r.out_since_prefill, r.kv_held = r.prompt + r.out, 0, 0, 0
            waiting.insert(0, r)
            res.preemptions += 1
        for rid in plan.ignored:
            waiting.remove(by_id[rid])
        for rid in plan.admitted:
            r = by_id[rid]
            waiting.remove(r)
            r.kv_held = math.ceil(r.prefill_len / bs)
            free -= r.kv_held
        if not plan.entries:
            now = pending[-1].arrival_s if pending else horizon_s
            continue
        context = 0.0
        for e in plan.entries:
            context += e.start_token + (e.tokens / 2 if e.tokens > 1 else 0)
        end = now + prof.batch_time_s(tokens=plan.tokens, seqs=len(plan.entries), context_tokens=context)
        nb += 1
        tbar += (end - now - tbar) / nb
        advanced: list[Req] = []
        for e in plan.entries:
            r = by_id[e.request_id]
            if e.kind in (EntryKind.CRITICAL_DECODE, EntryKind.NONCRITICAL_DECODE):
                need = max(0, math.ceil((r.prefill_len + r.out_since_prefill) / bs) - r.kv_held)
                r.kv_held += need
                free -= need
                emitted = True
            else:
                r.prefilled += e.tokens
                if r in paused:
                    paused.remove(r)
                emitted = r.prefilled == r.prefill_len
                if not emitted:
                    paused.append(r)
                else:
                    decodes[r.rid] = r
            if emitted:
                r.out += 1
                r.out_since_prefill += 1
                if r.first_token_s is None:
                    r.first_token_s = end
                elif r.last_token_s is not None and r.arrival_s >= warmup_s:
                    res.gaps_s["paid" if r.paid else "free"].append(end - r.last_token_s)
                r.last_token_s = end
                if r.out >= r.target_out:
                    decodes.pop(r.rid, None)
                    free += r.kv_held
                    r.kv_held = 0
                else:
                    advanced.append(r)
        kv_use = 1.0 - free / prof.kv_blocks_total
        res.kv_use.append(kv_use)
        delta = offset_for_kv_use(kv_use, variant.rule) if variant.rule is not None else 0.0
        for r in advanced:
            r.lst_s = last_schedulable_time(last_batch_end_s=end, tbt_slo_s=r.tbt_s, delta=delta, tbar_s=tbar)
        now = end
        res.batches += 1
    for r in reqs:
        if warmup_s <= r.arrival_s < horizon_s:
            first = r.first_token_s if r.first_token_s is not None else horizon_s
            res.ttft_s.append(first - r.arrival_s)
    return res


def variants() -> list[Variant]:
    dyn = OffsetRule.from_params(SlaiParams())
    fixed = OffsetRule.from_params(SlaiParams(offset_mode=OffsetMode.FIXED))
    return [
        Variant("sarathi_fcfs", BuilderParams(scheduler=SchedulerKind.SARATHI, prefill_order=PrefillOrder.FCFS), None),
        Variant("slai_spf_fixed10", BuilderParams(), fixed),
        Variant("slai_spf_dynamic", BuilderParams(), dyn),
    ]


def time_builder(repeats: int) -> float:
    decodes = tuple(
        RequestView(
            request_id=f"d{i}",
            arrival_s=0.0,
            prompt_tokens=1000,
            prefilled_tokens=1000,
            output_tokens=i,
            tbt_slo_s=0.5,
            kv_blocks_held=70,
            last_schedulable_s=float(i % 7),
        )
        for i in range(120)
    )
    waiting = tuple(
        RequestView(request_id=f"w{i}", arrival_s=0.0, prompt_tokens=50 + 37 * i, tbt_slo_s=0.5) for i in range(40)
    )
    queues = SchedulerQueues(decodes=decodes, waiting=waiting)
    kv = KvView(free_blocks=5000, total_blocks=14733)
    start = time.perf_counter()
    for _ in range(repeats):
        build_batch(3.0, queues, kv, BuilderParams())
    return (time.perf_counter() - start) / repeats * 1e6


def capacity(rows: list[dict[str, float]]) -> float | None:
    ok = [
        r["rate_per_s"]
        for r in rows
        if r["ttft_p50_s"] <= 0.5 and r["tbt_p99_paid_s"] <= 0.1 and r["tbt_p99_free_s"] <= 0.5
    ]
    return max(ok) if ok else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out/bench/bench_slai.json"))
    parser.add_argument("--rates", default="0.8,1.0,1.2,1.4,1.6", help="arrival rates, req/s, comma separated")
    parser.add_argument("--horizon-s", type=float, default=900.0)
    parser.add_argument("--warmup-s", type=float, default=60.0)
    parser.add_argument("--paid-frac", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    rates = [float(x) for x in args.rates.split(",")]
    table: dict[str, list[dict[str, float]]] = {}
    print(
        f"{'variant':18} {'rate':>5} {'ttft_p50':>9} {'p99_paid':>9} {'p99_free':>9} {'kv_p50':>7}"
        f" {'preempt':>7} {'batches':>7}"
    )
    for v in variants():
        table[v.name] = []
        for rate in rates:
            res = simulate(v, workload(rate, args.horizon_s, args.paid_frac, args.seed), args.horizon_s, args.warmup_s)
            row = {
                "rate_per_s": rate,
                "ttft_p50_s": float(np.median(res.ttft_s)) if res.ttft_s else math.nan,
                "tbt_p99_paid_s": float(np.quantile(res.gaps_s["paid"], 0.99)) if res.gaps_s["paid"] else 0.0,
                "tbt_p99_free_s": float(np.quantile(res.gaps_s["free"], 0.99)) if res.gaps_s["free"] else 0.0,
                "kv_use_p50_frac": float(np.median(res.kv_use)) if res.kv_use else 0.0,
                "preemptions": res.preemptions,
                "batches": res.batches,
            }
            table[v.name].append(row)
            print(
                f"{v.name:18} {rate:5.2f} {row['ttft_p50_s']:9.3f} {row['tbt_p99_paid_s']:9.3f} "
                f"{row['tbt_p99_free_s']:9.3f} {row['kv_use_p50_frac']:7.3f} {res.preemptions:7d} {res.batches:7d}"
            )
    caps = {name: capacity(rows) for name, rows in table.items()}
    build_us = time_builder(200)
    print(f"capacity at median TTFT <= 0.5 s and P99 TBT in target (grid): {caps}")
    print(
        f"paper: capacity {PAPER['capacity_per_s'][0]} -> {PAPER['capacity_per_s'][1]} req/s; "
        f"high-load median TTFT 1.5 s (Sarathi FCFS) -> 0.7 s (SLAI SPF dynamic), -53%"
    )
    print(f"SLAI batch build, 120 decodes + 40 waiting: {build_us:.0f} us per call")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "args": {k: str(v) for k, v in vars(args).items()},
        "results": table,
        "capacity_per_s": caps,
        "paper": PAPER,
        "slai_build_us": build_us,
    }
    args.out.write_text(json.dumps(report, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
