"""EB+ in the closed loop, offline loop mode: simulated engine -> control plane -> EB+ document -> engine.

One simulated engine publishes its telemetry into an ``OfflineControlPlane``; EB+ decides every 100
completions and the engine's ``EbplusScheduler`` obeys the pushed mode, theta and N. The engine's
true step times are the Qwen3-8B calibrations of spec seed-001 section 6.4 with alpha_MB as
calibrated (alpha_MB = alpha_p, the reference code's default) and 3% seeded per-step noise. EB+
never reads that model: the engine registers no hardware profile, the policy has none
(``calibration_id=None``) and runs with ``online_cost_model=True``, so it decides from the cost
model the stream processor fits from the engine's own step events (after an EB probe that collects
exclusive steps). Seeded and deterministic; each run takes a few seconds. Figures print with ``-s``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from decide.registry import PolicyRegistry
from decide.wiring.ebplus import ebplus_inputs, ebplus_spec
from policies.ebplus import CostModel, EbplusParams
from policies.ebplus.calibration import QWEN3_8B_H200, QWEN3_8B_RTX_PRO_6000, calibration_profile
from services.replay.offline import OfflineControlPlane
from services.sdk.protocol import ListSink, StaticPolicySource
from services.sim.engine import EngineConfig, SimEngine
from services.sim.routing import LeastLoadedRouter
from services.sim.run_summary import MetricsRecorder
from services.sim.schedulers import EbplusScheduler, MixedChunkedScheduler
from services.sim.simulation import Simulation
from services.sim.telemetry import EngineTelemetry
from services.sim.timing import EbTiming, JitteredTiming
from services.sim.workload import BatchArrivals, GeometricLengths, PoissonArrivals, Workload, WorkloadPhase

ENGINE_ID = "engine-0"
JITTER_FRAC = 0.03  # a few percent per step; decode-fit R^2 0.98-0.99 in spec section 6.4


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class LoopRun:
    """What one closed-loop run gives a test."""

    tokens_per_s: float
    modes: list[str]
    sources: list[str]
    decision_ts: list[float]
    fitted: CostModel | None


def _run(
    calib_id: str, workload: Workload, *, ebplus: bool, duration_s: float, kv_blocks: int, online: bool = True
) -> LoopRun:
    """One engine timed by ``calib_id`` under ``workload``: EB+ on its online fit, or plain mixed batching.

    ``online=False`` registers the engine's calibration profile and lets EB+ decide from it instead.
    """
    profile = calibration_profile(calib_id)
    timing = JitteredTiming(
        EbTiming.from_cost_model(profile.cost_model), jitter_frac=JITTER_FRAC, seed=np.random.SeedSequence([3, 1])
    )
    config = EngineConfig(
        engine_id=ENGINE_ID,
        model=profile.model,
        gpu=profile.gpu,
        hardware_profile=None if online else calib_id,
        max_num_seqs=512,
        token_budget_tokens=8192,
        kv_blocks_total=kv_blocks,
    )
    params = EbplusParams(calibration_id=None if online else calib_id)
    registry = PolicyRegistry([ebplus_spec(params, online_cost_model=online)])
    plane = OfflineControlPlane("loop", registry)
    metrics = MetricsRecorder()
    engine = SimEngine(
        config,
        scheduler=EbplusScheduler() if ebplus else MixedChunkedScheduler(),
        timing=timing,
        telemetry=EngineTelemetry(engine_id=ENGINE_ID, deployment="loop", sink=plane if ebplus else ListSink()),
        policy_source=plane if ebplus else StaticPolicySource(),
        metrics=metrics,
    )
    requests = workload.generate(duration_s, np.random.default_rng(3))
    Simulation(engines=[engine], router=LeastLoadedRouter(), requests=requests, metrics=metrics).run(duration_s)
    summary = metrics.summarize(duration_s)
    payloads = [d.document["payload"] for d in plane.decisions if d.kind == "ebplus" and d.accepted]
    fitted = None
    if plane.snapshots:
        inputs = ebplus_inputs(plane.snapshots[-1], online_cost_model=True)
        fitted = None if inputs is None else inputs.cost_model
    return LoopRun(
        tokens_per_s=summary.throughput_tokens_per_s,
        modes=[str(p["mode"]) for p in payloads],  # type: ignore[index,call-overload]
        sources=[str(p["calib_id"]) for p in payloads],  # type: ignore[index,call-overload]
        decision_ts=[
            float(d.document["computed_at"])  # type: ignore[arg-type]
            for d in plane.decisions
            if d.kind == "ebplus" and d.accepted
        ],
        fitted=fitted,
    )


def _saturated(count: int) -> Workload:
    """Table 3's stationary lengths (mu_L = 512, mu_O = 256, geometric outputs), all queued at t = 0."""
    lengths = GeometricLengths(prompt_tokens=512, mean_output_tokens=256.0)
    return Workload(phases=(WorkloadPhase(start_s=0.0, arrivals=BatchArrivals(count=count), lengths=lengths),))


def _decided_from_fit(loop: LoopRun) -> list[str]:
    """The modes of the decisions taken on the online fit (the probe decisions left out)."""
    return [m for m, s in zip(loop.modes, loop.sources, strict=True) if s == "online"]


class TestSaturation:
    @pytest.mark.paper(seed="001", ref="Table 3")
    def test_rtx_pro_6000_ebplus_on_its_online_fit_beats_mixed_batching(self) -> None:
        """Table 3, RTX PRO 6000, c = 2048: v1 8,830 / EB+ 13,214 tok/s (+50%).

        DESIGN section 9 asks EB+ >= MB on a bandwidth-constrained profile; we ask +20%, well above
        the 3% noise, because EB+ that merely tied MB here would mean the online loop never chose EB
        (ops/bench/bench_ebplus_loop.py measures +42% +- 2% over 5 seeds of a longer run).
        """
        workload = _saturated(2000)
        mixed = _run(QWEN3_8B_RTX_PRO_6000, workload, ebplus=False, duration_s=60.0, kv_blocks=27_000)
        loop = _run(QWEN3_8B_RTX_PRO_6000, workload, ebplus=True, duration_s=60.0, kv_blocks=27_000)
        print(f"\nRTX PRO 6000 saturated: MB {mixed.tokens_per_s:,.0f} tok/s, EB+ {loop.tokens_per_s:,.0f} tok/s")
        print(f"  EB+ modes: {''.join(m[0] for m in loop.modes)} from {set(loop.sources)}")
        assert set(loop.sources) <= {"online", "probe"}
        assert _decided_from_fit(loop)[:1] == ["EB"]
        assert loop.tokens_per_s > 1.2 * mixed.tokens_per_s

    @pytest.mark.paper(seed="001", ref="Table 3")
    def test_h200_ebplus_on_its_online_fit_stays_within_three_percent_of_mixed_batching(self) -> None:
        """Table 3, H200, c = 2048: v1 26,368 / EB+ 27,043 tok/s; EB+ must not lose more than 3% (DESIGN 9)."""
        workload = _saturated(4000)
        mixed = _run(QWEN3_8B_H200, workload, ebplus=False, duration_s=60.0, kv_blocks=40_000)
        loop = _run(QWEN3_8B_H200, workload, ebplus=True, duration_s=60.0, kv_blocks=40_000)
        print(f"\nH200 saturated: MB {mixed.tokens_per_s:,.0f} tok/s, EB+ {loop.tokens_per_s:,.0f} tok/s")
        print(f"  EB+ modes: {''.join(m[0] for m in loop.modes)} from {set(loop.sources)}")
        assert set(loop.sources) <= {"online", "probe"}
        assert "online" in loop.sources
        assert loop.tokens_per_s >= 0.97 * mixed.tokens_per_s


class TestOnlineCostFit:
    def test_prefill_and_mixed_fits_recover_the_true_h200_coefficients(self) -> None:
        """The prefill slope and beta_MB(1/3) EB+ decides from match the noise-free model within 5%.

        With 3% unbiased noise over hundreds of steps the slopes are tight (5% is several standard
        errors). The decode fit is left out on purpose: it is biased (beta_d about 1.6x here) because
        the simulator prices a pure-decode step of a mixed-batching scheduler with the mixed formula,
        and the step event cannot tell it from an EB decode step; docs/policies/ebplus.md reports it.
        """
        loop = _run(QWEN3_8B_H200, _saturated(4000), ebplus=True, duration_s=60.0, kv_blocks=40_000)
        truth = calibration_profile(QWEN3_8B_H200).cost_model
        assert loop.fitted is not None
        assert loop.fitted.beta_mb is not None
        assert truth.beta_mb is not None
        print(f"\nH200 fit: {loop.fitted}\n  true: {truth}")
        assert loop.fitted.beta_p_s_per_token == pytest.approx(truth.beta_p_s_per_token, rel=0.05)
        assert loop.fitted.beta_mb.at(1.0 / 3.0) == pytest.approx(truth.beta_mb.at(1.0 / 3.0), rel=0.05)


class TestWorkloadShift:
    @pytest.mark.paper(seed="001", ref="Appendix A item 6")
    def test_mode_follows_a_prefill_heavy_to_decode_heavy_shift(self) -> None:
        """H200: Eq. 8 picks MB for mu_L/mu_O = 1024/128 and EB for 128/1024 at high occupancy.

        The decision stream must read MB... then EB, with the switch after the shift at t = 40 s.
        This runs on the registered profile: on the online fit EB+ stays on MB after the shift,
        because the biased decode fit (see TestOnlineCostFit) inflates beta_EB^w; a shortfall that
        docs/policies/ebplus.md reports.
        """
        shift_s = 40.0
        prefill_heavy = GeometricLengths(prompt_tokens=1024, mean_output_tokens=128.0)
        decode_heavy = GeometricLengths(prompt_tokens=128, mean_output_tokens=1024.0)
        workload = Workload(
            phases=(
                WorkloadPhase(start_s=0.0, arrivals=PoissonArrivals(rate_per_s=30.0), lengths=prefill_heavy),
                WorkloadPhase(start_s=shift_s, arrivals=PoissonArrivals(rate_per_s=14.0), lengths=decode_heavy),
            )
        )
        loop = _run(QWEN3_8B_H200, workload, ebplus=True, duration_s=110.0, kv_blocks=40_000, online=False)
        fitted = list(zip(loop.decision_ts, loop.modes, strict=True))
        sequence = "".join(m[0] for _, m in fitted)
        switch_s = next(ts for ts, mode in fitted if mode == "EB")
        print(f"\nH200 shift 1024/128 -> 128/1024 at {shift_s:.0f} s: modes {sequence}, first EB at {switch_s:.1f} s")
        collapsed = [m for i, (_, m) in enumerate(fitted) if i == 0 or fitted[i - 1][1] != m]
        assert collapsed == ["MB", "EB"]
        assert switch_s > shift_s
