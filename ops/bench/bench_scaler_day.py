"""A simulated day of the scaler: FleetOpt plans under a diurnal arrival curve, carried to replicas by the rules.

Every ``--plan-every-s`` of event time the FleetOpt planner (policies.fleetopt.decide, exact mode, the Azure
length CDF of services/sim/data) decides from a noisy estimate of a diurnal arrival rate
(``rate(t) = peak * (1 - depth * (1 + cos(2 pi t / day)) / 2)``, estimate error ``--noise`` relative, seeded),
and the scaler's pure rules (policies.scaling.decide_pool) turn each pool's GPUs into replica changes. Three
arms on the same plans:

- ``naive``: the planner without its hysteresis, the scaler without its rules (no hold, no cool-down, any step;
  at least one replica per pool, as in the other arms);
- ``rules``: the same plans, the scaler's rules (``--hold-s``, ``--cooldown-s``, ``--step``);
- ``planner+rules``: the planner's own hysteresis (spec 5.4 defaults) and the scaler's rules.

Per arm and pool: actions, reversals (an action opposite to the previous one: flapping), GPU-hours run,
GPU-hours a static fleet sized for the day's peak would run, and GPU-hours below the unheld plan (capacity
short of what the planner wanted at that moment; the SLO risk the damping buys).

P99 TTFT against the SLO: every minute, each pool's P99 TTFT at the *true* arrival rate (not the noisy
estimate the plan used) and the GPUs the arm actually ran, from the planner's own M/G/c model
(policies.fleetopt.sizing.evaluate_pool: Erlang-C P99 wait, Eq. 6, plus the calibrated TTFT overhead,
Eq. 8) at the plan's boundary and compression ratio. Reported: the worst minute and the minutes over
``t_slo_s``. It is the planner's model, not a measurement: a pool it calls sufficient meets the SLO by
construction, so the figure shows what the damping costs or saves against that model, not whether the
model is right (the real run, bench_scaler_local.py, measures TTFT on real engines).

    PYTHONPATH=. python ops/bench/bench_scaler_day.py [--peak-rate 60] [--depth 0.7] [--noise 0.05]
        [--plan-every-s 60] [--seed 7] [--out out/bench/scaler_day.json] [--plot docs/img/scaler_day.png]
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from pathlib import Path

import matplotlib as mpl
import numpy as np

mpl.use("Agg")
import matplotlib.pyplot as plt

from policies.fleetopt.cdf import LengthCdf
from policies.fleetopt.decide import decide
from policies.fleetopt.inputs import FleetoptInputs
from policies.fleetopt.params import FleetoptParams
from policies.fleetopt.sizing import evaluate_pool
from policies.fleetopt.sweep import PlanPoint, sweep
from policies.scaling import PlanTarget, PoolLimits, PoolMemory, decide_pool, plan_targets
from schemas.policy_docs.base import InputsDigest
from schemas.policy_docs.fleetopt import FleetoptPolicy

DAY_S = 86_400.0
CDF_FILE = Path("services/sim/data/fleetopt-azure_cdf.json")


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """One plan's time, each pool's GPUs, the true arrival rate then and the plan's routing (B_short, gamma)."""

    t_s: float
    gpus: dict[str, int]
    version: int
    true_rate_per_s: float
    b_short_tokens: int
    gamma: float


class TtftModel:
    """Each pool's P99 TTFT at a rate and a GPU count, by the planner's model at the plan's (B_short, gamma)."""

    def __init__(self, cdf: LengthCdf, params: FleetoptParams) -> None:
        self._cdf = cdf
        self._params = params
        self._points: dict[tuple[int, float], PlanPoint] = {}

    @property
    def slo_s(self) -> float:
        """The P99 TTFT target T_slo, seconds."""
        return self._params.t_slo_s

    def p99_ttft_s(self, plan: Plan, pool: str, n_gpus: int) -> float:
        """P99 TTFT of ``pool`` running ``n_gpus`` at the true rate of ``plan``'s minute; inf when it cannot keep up."""
        key = (plan.b_short_tokens, plan.gamma)
        if key not in self._points:
            inputs = FleetoptInputs(arrival_rate_per_s=1.0, cdf=self._cdf)
            points = sweep(inputs, self._params, b_short_tokens=(plan.b_short_tokens,))
            self._points[key] = min(points, key=lambda p: abs(p.split.gamma - plan.gamma))
        point = self._points[key]
        share = point.split.short_rate_per_s if pool == "short" else point.split.long_rate_per_s
        calib = point.short_calib if pool == "short" else point.long_calib
        rate = share * plan.true_rate_per_s
        if calib is None or rate <= 0.0:
            # The planner drops a pool below min_pool_rate_per_s (the long pool here: about 0.002 req/s);
            # its few requests are not counted against the SLO, as in the planner.
            return 0.0
        sizing = evaluate_pool(n_gpus, rate, calib, self._params)
        return sizing.p99_ttft_s if math.isfinite(sizing.p99_ttft_s) and sizing.util_frac < 1.0 else math.inf


def diurnal_rate(t_s: float, peak: float, depth: float) -> float:
    """Arrival rate at ``t_s``: the peak at midday, ``peak * (1 - depth)`` at midnight, req/s."""
    return peak * (1.0 - depth * (1.0 + math.cos(2.0 * math.pi * t_s / DAY_S)) / 2.0)


def read_cdf() -> LengthCdf:
    """The Azure length CDF the simulator ships."""
    raw = json.loads(CDF_FILE.read_text())
    return LengthCdf(tokens=tuple(int(t) for t, _ in raw), frac=tuple(float(f) for _, f in raw))


def plans(args: argparse.Namespace, *, hysteresis: bool) -> list[Plan]:
    """The day's plans, each decided from the previous document (as the policy service does)."""
    cdf = read_cdf()
    params = (
        FleetoptParams() if hysteresis else FleetoptParams(deadband_frac=0.0, scale_down_runs=1, scale_down_dwell_s=0.0)
    )
    rng = np.random.default_rng(args.seed)
    previous: FleetoptPolicy | None = None
    out = []
    steps = int(DAY_S // args.plan_every_s)
    for i in range(steps):
        t_s = i * args.plan_every_s
        true_rate = diurnal_rate(t_s, args.peak_rate, args.depth)
        rate = true_rate * (1.0 + args.noise * float(rng.standard_normal()))
        decision = decide(FleetoptInputs(arrival_rate_per_s=max(rate, 0.1), cdf=cdf), previous, params, t_s)
        previous = FleetoptPolicy(
            scope="fleet",
            deployment="bench",
            version=i + 1,
            computed_at=t_s,
            valid_until=t_s + 10 * args.plan_every_s,
            inputs=InputsDigest(snapshot_id=f"day-{i}"),
            payload=decision.payload,
            state=decision.state,
            previous_version=None if i == 0 else i,
        )
        out.append(
            Plan(
                t_s=t_s,
                gpus={k: v.n_gpus for k, v in plan_targets(previous).items()},
                version=i + 1,
                true_rate_per_s=true_rate,
                b_short_tokens=decision.payload.routing.b_short_tokens,
                gamma=decision.payload.routing.gamma,
            )
        )
    return out


def run_arm(
    day: list[Plan], need: list[Plan], limits: dict[str, PoolLimits], dt_s: float, ttft: TtftModel
) -> dict[str, dict[str, object]]:
    """Drive each pool through ``day``'s plans; compare with ``need`` (the unheld plans) on the same clock."""
    result: dict[str, dict[str, object]] = {}
    for pool, pool_limits in limits.items():
        start = -(-day[0].gpus[pool] // pool_limits.gpus_per_replica)
        memory = PoolMemory(replicas=min(pool_limits.max_replicas, max(pool_limits.min_replicas, start)))
        actions, reversals, last_direction = 0, 0, 0
        gpu_s, short_gpu_s, trace, p99s = 0.0, 0.0, [], []
        for plan, wanted in zip(day, need, strict=True):
            target = PlanTarget(n_gpus=plan.gpus[pool], plan_version=plan.version, computed_at_s=plan.t_s)
            decision = decide_pool(pool_limits, memory, target, plan.t_s)
            memory = decision.memory
            if decision.changed:
                actions += 1
                direction = 1 if decision.to_replicas > decision.from_replicas else -1
                reversals += int(last_direction not in (0, direction))
                last_direction = direction
            gpus = memory.replicas * pool_limits.gpus_per_replica
            gpu_s += gpus * dt_s
            short_gpu_s += max(0, wanted.gpus[pool] - gpus) * dt_s
            p99s.append(ttft.p99_ttft_s(plan, pool, gpus))
            trace.append([plan.t_s, plan.gpus[pool], gpus, min(p99s[-1], 1e9)])
        peak = max(-(-p.gpus[pool] // pool_limits.gpus_per_replica) for p in need) * pool_limits.gpus_per_replica
        result[pool] = {
            "actions": actions,
            "reversals": reversals,
            "gpu_hours": round(gpu_s / 3600.0, 1),
            "static_peak_gpu_hours": round(peak * len(day) * dt_s / 3600.0, 1),
            "gpu_hours_below_unheld_plan": round(short_gpu_s / 3600.0, 2),
            "p99_ttft_worst_minute_s": round(min(max(p99s), 1e9), 4),
            "minutes_over_slo": sum(1 for v in p99s if v > ttft.slo_s),
            "trace": trace,
        }
    return result


def plot(arms: dict[str, dict[str, dict[str, object]]], slo_s: float, path: Path) -> None:
    """Replicas against the plan and P99 TTFT against the SLO over the day, short pool, one line per arm."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    first = True
    for arm, pools in arms.items():
        trace = np.array(pools["short"]["trace"], dtype=np.float64)
        hours = trace[:, 0] / 3600.0
        if first:
            top.plot(hours, trace[:, 1], color="0.7", lw=0.8, label="unheld plan (GPUs)")
            first = False
        top.step(hours, trace[:, 2], where="post", lw=1.2, label=f"{arm} ({pools['short']['actions']} actions)")
        bottom.plot(hours, np.minimum(trace[:, 3], 10 * slo_s), lw=1.0, label=arm)
    bottom.axhline(slo_s, color="red", ls="--", lw=1.0, label=f"SLO {slo_s:g} s")
    top.set_ylabel("short pool GPUs")
    top.legend(fontsize=8, loc="upper left")
    bottom.set_ylabel("P99 TTFT, s (model)")
    bottom.set_xlabel("hour of the simulated day")
    bottom.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)


def main() -> None:
    """Run the three arms and write the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peak-rate", type=float, default=60.0, help="arrival rate at the daily peak, req/s")
    parser.add_argument("--depth", type=float, default=0.7, help="trough is peak * (1 - depth)")
    parser.add_argument("--noise", type=float, default=0.05, help="relative error of the rate estimate")
    parser.add_argument("--plan-every-s", type=float, default=60.0, help="event time between plans, s")
    parser.add_argument("--hold-s", type=float, default=600.0, help="the scaler's scale-down hold, s")
    parser.add_argument("--cooldown-s", type=float, default=60.0, help="the scaler's cool-down, s")
    parser.add_argument("--step", type=int, default=2, help="the scaler's largest step, replicas")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=Path("out/bench/scaler_day.json"))
    parser.add_argument("--plot", type=Path, default=None, help="write the short pool's day as a PNG here")
    args = parser.parse_args()
    unheld = plans(args, hysteresis=False)
    held = plans(args, hysteresis=True)
    free = {
        pool: PoolLimits(
            min_replicas=1,
            max_replicas=100_000,
            gpus_per_replica=tp,
            max_step_replicas=100_000,
            cooldown_s=0.0,
            scale_down_hold_s=0.0,
        )
        for pool, tp in (("short", 1), ("long", 1))
    }
    ruled = {
        pool: PoolLimits(
            min_replicas=1,
            max_replicas=100_000,
            gpus_per_replica=tp,
            max_step_replicas=args.step,
            cooldown_s=args.cooldown_s,
            scale_down_hold_s=args.hold_s,
        )
        for pool, tp in (("short", 1), ("long", 1))
    }
    dt_s = args.plan_every_s
    ttft = TtftModel(read_cdf(), FleetoptParams())
    arms = {
        "naive": run_arm(unheld, unheld, free, dt_s, ttft),
        "rules": run_arm(unheld, unheld, ruled, dt_s, ttft),
        "planner+rules": run_arm(held, unheld, ruled, dt_s, ttft),
    }
    if args.plot is not None:
        plot(arms, ttft.slo_s, args.plot)
    report = {"settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}, **arms}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    for arm in ("naive", "rules", "planner+rules"):
        for pool in ("short", "long"):
            row = arms[arm][pool]
            print(
                f"{arm:14s} {pool:5s} actions={row['actions']:4d} reversals={row['reversals']:4d} "
                f"gpu_h={row['gpu_hours']:8.1f} static_peak_gpu_h={row['static_peak_gpu_hours']:8.1f} "
                f"below_plan_gpu_h={row['gpu_hours_below_unheld_plan']:6.2f} "
                f"p99_ttft_worst_s={row['p99_ttft_worst_minute_s']:.3f} minutes_over_slo={row['minutes_over_slo']}"
            )


if __name__ == "__main__":
    main()
