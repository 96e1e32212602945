"""EB+ benchmark: the analytic EB-vs-MB throughput model beside the paper's Table 3, and decide() speed.

The analytic side only: the closed-loop comparison in the simulator is ops/bench/bench_ebplus_loop.py.
This script prints:

1. Eq. 4 (EB at k = theta N) and the MB model 1 / beta_MB^e(r^) in tok/s on the Qwen3-8B H200 and
   RTX PRO 6000 calibrations at mu_L = 512, mu_O = 256, set beside Table 3 (c = 2048) and the spec's
   section 6.5 sanity table, plus the EB+ mode Eq. 8 picks at N_obs = 32, 512, 2048.
2. decide() evaluations per second on one core (wall clock; never asserted by a test).

Usage (from the repository root): PYTHONPATH=. python ops/bench/bench_ebplus.py [--out out/bench/bench_ebplus.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from pathlib import Path

from policies.ebplus import EbplusInputs, EbplusParams, calibration_profile, decide
from policies.ebplus.base_threshold import base_threshold

# Paper Table 3, Qwen3-8B, c = 2048, mu_L = 512, mu_O = 256, tok/s: (v1, EB(k*), EB+).
PAPER_TABLE3_C2048 = {"qwen3-8b@h200": (26_368, 27_198, 27_043), "qwen3-8b@rtx-pro-6000": (8_830, 13_179, 13_214)}
# Spec section 6.5 sanity table (Eq. 4 at N = 1024, theta = 0.7; MB = 1 / beta_MB(1/3)), tok/s.
SPEC_MODEL = {"qwen3-8b@h200": (27_130, 22_783), "qwen3-8b@rtx-pro-6000": (13_543, 7_712)}
MU_L, MU_O = 512.0, 256.0


def eb_tokens_per_s(calib_id: str, n_seqs: int, theta: float) -> float:
    """Eq. 4 with k = theta N, converted to tokens per second (times mu_L + mu_O)."""
    cost = calibration_profile(calib_id).cost_model
    zeta = -math.log1p(-theta)
    beta_eb_w = (cost.beta_p_s_per_token * MU_L + cost.beta_d_s_per_seq * MU_O) / (MU_L + MU_O)
    per_request_s = (cost.alpha_p_s + cost.alpha_d_s * zeta * MU_O) / (theta * n_seqs) + beta_eb_w * (MU_L + MU_O)
    return (MU_L + MU_O) / per_request_s


def mb_tokens_per_s(calib_id: str) -> float:
    """Saturated MB throughput 1 / beta_MB^e(r^), tokens per second."""
    beta_mb = calibration_profile(calib_id).cost_model.beta_mb
    if beta_mb is None:
        return math.nan
    return 1.0 / beta_mb.at(MU_O / (MU_L + MU_O))


def main() -> None:
    """Print the tables and write them as JSON to ``--out``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("out/bench/bench_ebplus.json"))
    parser.add_argument("--decide-iterations", type=int, default=2000)
    args = parser.parse_args()
    rows = []
    print(
        f"{'profile':<24}{'EB N=1024 th=.7':>17}{'spec':>8}{'Tab3 EB':>9}{'EB th0':>9}{'MB':>8}{'spec':>8}"
        f"{'Tab3 v1':>9}  EB+ mode at N_obs 32/512/2048"
    )
    for calib_id, (v1, eb, ebplus) in PAPER_TABLE3_C2048.items():
        cost = calibration_profile(calib_id).cost_model
        theta0 = base_threshold(p0=1 / MU_O, alpha_p_s=cost.alpha_p_s, alpha_d_s=cost.alpha_d_s).theta0
        modes = []
        for n_obs in (32.0, 512.0, 2048.0):
            inputs = EbplusInputs(
                p0=1 / MU_O,
                eta=0.0,
                hazard_samples=500,
                mu_l_tokens=MU_L,
                mu_o_tokens=MU_O,
                n_obs=n_obs,
                cost_model=None,
                kv_capacity_tokens=440_000,
                max_num_seqs=1024,
                completions=100,
            )
            modes.append(decide(inputs, None, EbplusParams(calibration_id=calib_id), 0.0).payload.mode)
        row = {
            "calib_id": calib_id,
            "eb_model_n1024_theta07_tok_per_s": eb_tokens_per_s(calib_id, 1024, 0.7),
            "eb_model_n1024_theta0_tok_per_s": eb_tokens_per_s(calib_id, 1024, theta0),
            "mb_model_tok_per_s": mb_tokens_per_s(calib_id),
            "spec_eb_model_tok_per_s": SPEC_MODEL[calib_id][0],
            "spec_mb_model_tok_per_s": SPEC_MODEL[calib_id][1],
            "paper_table3_c2048_v1_tok_per_s": v1,
            "paper_table3_c2048_eb_tok_per_s": eb,
            "paper_table3_c2048_ebplus_tok_per_s": ebplus,
            "ebplus_mode_at_n_obs_32_512_2048": modes,
        }
        rows.append(row)
        print(
            f"{calib_id:<24}{row['eb_model_n1024_theta07_tok_per_s']:>17,.0f}{SPEC_MODEL[calib_id][0]:>8,}"
            f"{eb:>9,}{row['eb_model_n1024_theta0_tok_per_s']:>9,.0f}{row['mb_model_tok_per_s']:>8,.0f}"
            f"{SPEC_MODEL[calib_id][1]:>8,}{v1:>9,}  {'/'.join(modes)}"
        )
    inputs = EbplusInputs(
        p0=1 / MU_O,
        eta=1e-6,
        hazard_samples=500,
        mu_l_tokens=MU_L,
        mu_o_tokens=MU_O,
        n_obs=1024.0,
        cost_model=None,
        kv_capacity_tokens=440_000,
        max_num_seqs=1024,
        completions=100,
    )
    params = EbplusParams()
    start = time.perf_counter()
    for i in range(args.decide_iterations):
        decide(dataclasses.replace(inputs, completions=100 * (i + 1)), None, params, float(i))
    elapsed_s = time.perf_counter() - start
    decisions_per_s = args.decide_iterations / elapsed_s
    print(f"decide(): {decisions_per_s:,.0f} decisions/s ({1e6 / decisions_per_s:.1f} us each, one core)")
    result = {"throughput_model": rows, "decide_per_s": decisions_per_s, "decide_iterations": args.decide_iterations}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
