"""Per-(model, GPU) calibration profiles of the EB+ cost model (specs/seed-001-ebplus.md section 6.4).

The coefficients are the reference code's calibration JSONs (weifang231/eb-vllm
`reproduce/calibration/*.json`, measured by its `HardwareCalibrator`: one-step prefill at
L in {256..4096}, decode at n in {16..1024} with context 512, eager mode, float16, OLS, median of 20
timed runs), as transcribed in the spec's section 6.4 table. The paper itself prints none.
beta_MB^e(r) quadratics exist only for Qwen3-8B (fitted to 1/throughput of v1 runs at
r in {0.11, 0.50, 0.89}). alpha_MB = alpha_p everywhere: the reference code's default
("paper approximation alpha_p ~ alpha_d ~ alpha_MB", spec section 4.2).

The simulator uses the same profiles as its timing model, so policy and simulator agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from policies.ebplus.inputs import BetaMbQuadratic, CostModel
from schemas.errors import InvalidInputError

_SOURCE = "weifang231/eb-vllm reproduce/calibration/*.json via specs/seed-001-ebplus.md section 6.4"


@dataclass(frozen=True, slots=True, kw_only=True)
class CalibrationProfile:
    """One (model, GPU) calibration with its provenance.

    Attributes:
        calib_id: stable key, ``<model>@<gpu>`` in lower case.
        model: model name as the calibration file names it.
        gpu: GPU name.
        cost_model: the fitted coefficients.
        r2_prefill: R^2 of the prefill fit, or None when not recorded.
        r2_decode: R^2 of the decode fit, or None when not recorded.
        source: where the numbers come from.
    """

    calib_id: str
    model: str
    gpu: str
    cost_model: CostModel
    r2_prefill: float | None
    r2_decode: float | None
    source: str = _SOURCE


def _profile(
    model: str,
    gpu: str,
    coefficients: tuple[float, float, float, float],
    r2: tuple[float, float],
    beta_mb: BetaMbQuadratic | None = None,
) -> CalibrationProfile:
    alpha_p_s, beta_p_s_per_token, alpha_d_s, beta_d_s_per_seq = coefficients
    cost = CostModel(
        alpha_p_s=alpha_p_s,
        beta_p_s_per_token=beta_p_s_per_token,
        alpha_d_s=alpha_d_s,
        beta_d_s_per_seq=beta_d_s_per_seq,
        alpha_mb_s=alpha_p_s,
        beta_mb=beta_mb,
    )
    return CalibrationProfile(
        calib_id=f"{model}@{gpu}".lower(), model=model, gpu=gpu, cost_model=cost, r2_prefill=r2[0], r2_decode=r2[1]
    )


H200 = "H200"
RTX_PRO_6000 = "RTX-PRO-6000"

# beta_MB^e(r) of Qwen3-8B, spec section 6.4 (code's beta_mb_Qwen3-8B_*.json).
_BETA_MB_QWEN3_8B_H200 = BetaMbQuadratic(c0_s_per_token=2.494e-5, c1_s_per_token=5.193e-5, c2_s_per_token=1.478e-5)
_BETA_MB_QWEN3_8B_RTX = BetaMbQuadratic(
    c0_s_per_token=6.293427e-5, c1_s_per_token=1.968926e-4, c2_s_per_token=9.898973e-6
)

# (alpha_p s, beta_p s/token, alpha_d s, beta_d s/seq), (R^2 prefill, R^2 decode): spec section 6.4 table.
_PROFILES: tuple[CalibrationProfile, ...] = (
    _profile("Qwen3-8B", H200, (1.2786e-3, 2.4853e-5, 8.9212e-3, 4.5865e-5), (0.9968, 0.9827), _BETA_MB_QWEN3_8B_H200),
    _profile(
        "Qwen3-8B",
        RTX_PRO_6000,
        (4.6912e-3, 5.0079e-5, 1.03760e-2, 1.03881e-4),
        (0.99999, 0.9948),
        _BETA_MB_QWEN3_8B_RTX,
    ),
    _profile("Qwen3-30B-A3B", H200, (1.75396e-2, 1.3469e-5, 2.44184e-2, 2.4270e-5), (0.9653, 0.9253)),
    _profile("Qwen3-30B-A3B", RTX_PRO_6000, (3.11388e-2, 2.6901e-5, 2.24197e-2, 1.21944e-4), (0.9936, 0.9715)),
    _profile("Llama-3.1-8B-Instruct", H200, (3.467e-4, 2.4204e-5, 6.7907e-3, 4.4399e-5), (0.9980, 0.9903)),
    _profile("Llama-3.1-8B-Instruct", RTX_PRO_6000, (2.0509e-3, 4.9872e-5, 9.7646e-3, 9.5026e-5), (0.9996, 0.9915)),
    # Mistral-7B RTX alpha_d equals Qwen3-8B RTX alpha_d to all digits in the source: likely a copy artefact.
    _profile("Mistral-7B-v0.1", H200, (1.003e-4, 2.4208e-5, 6.6822e-3, 4.1606e-5), (0.9980, 0.9871)),
    _profile("Mistral-7B-v0.1", RTX_PRO_6000, (1.5595e-3, 4.9322e-5, 1.03760e-2, 2.27301e-4), (0.9996, 0.9675)),
    _profile("Mathstral-7B-v0.1", H200, (7.69e-6, 2.4394e-5, 6.7545e-3, 4.1342e-5), (0.9977, 0.9880)),
    _profile("Mathstral-7B-v0.1", RTX_PRO_6000, (1.6171e-3, 4.9750e-5, 9.3106e-3, 9.0997e-5), (0.9996, 0.9958)),
    _profile("Qwen2.5-Coder-7B", H200, (1.174e-4, 2.3503e-5, 6.2294e-3, 3.2466e-5), (0.9982, 0.9846)),
    _profile("Qwen2.5-Coder-7B", RTX_PRO_6000, (3.2626e-3, 4.5647e-5, 9.6016e-3, 6.9439e-5), (0.9994, 0.9932)),
    _profile("DeepSeek-R1-Distill-Qwen-7B", H200, (2.401e-4, 2.3310e-5, 6.2024e-3, 3.2442e-5), (0.9981, 0.9854)),
    _profile(
        "DeepSeek-R1-Distill-Qwen-7B", RTX_PRO_6000, (3.4347e-3, 4.5009e-5, 9.5341e-3, 6.9142e-5), (0.9992, 0.9936)
    ),
)

CALIBRATION_PROFILES: Mapping[str, CalibrationProfile] = MappingProxyType({p.calib_id: p for p in _PROFILES})

QWEN3_8B_H200 = "qwen3-8b@h200"
QWEN3_8B_RTX_PRO_6000 = "qwen3-8b@rtx-pro-6000"


def calibration_profile(calib_id: str) -> CalibrationProfile:
    """Return the calibration profile ``calib_id`` (e.g. ``qwen3-8b@h200``).

    Raises:
        InvalidInputError: when no profile has that id; the message lists the known ids.
    """
    try:
        return CALIBRATION_PROFILES[calib_id]
    except KeyError:
        known = ", ".join(sorted(CALIBRATION_PROFILES))
        msg = f"calibration_id {calib_id!r} is not a known profile (known: {known})"
        raise InvalidInputError(msg, field="calibration_id", value=calib_id) from None
