"""Last schedulable time, the critical test, deferral windows and the safety floor.

Paper eq. 8 (= eq. 9), the last schedulable time of decode i of request j:

    C_ij = e_{i-1,j} + TBT_j - delta * tbar

where e_{i-1,j} is the end of the last batch that held request j and tbar the running mean batch
time. A decode is critical at batch-construction time t_m iff t_m >= C_ij (paper §6).

Spec §3.4 [DERIVED] adds the deferral window of tier k, W_k = TBT_k - delta * tbar (W_k <= 0: that
tier's decodes are always critical, as under Sarathi-Serve), and the safety floor
delta_min = 2 * T_B,p99 / tbar: a decode that turns critical waits at most one in-flight batch and
then runs in the next, so its deadline holds while delta * tbar >= 2 * T_B.
"""

from __future__ import annotations

import math

from schemas.errors import InvalidInputError


def last_schedulable_time(*, last_batch_end_s: float, tbt_slo_s: float, delta: float, tbar_s: float) -> float:
    """Return C_ij of eq. 8 in seconds of engine time.

    The engine calls this after every batch for each request that batch advanced; delta is frozen
    into C until the request's next token (repo semantics, spec §8 P3).

    Args:
        last_batch_end_s: e_{i-1,j}, end of the batch that last held the request.
        tbt_slo_s: TBT_j of the request's tier.
        delta: the offset (a multiple of tbar, not seconds).
        tbar_s: running mean batch duration.

    Raises:
        InvalidInputError: a non-finite argument, a non-positive TBT or a negative delta or tbar.
    """
    _require_finite("last_batch_end_s", last_batch_end_s)
    _require_non_negative("delta", delta)
    _require_non_negative("tbar_s", tbar_s)
    if not (math.isfinite(tbt_slo_s) and tbt_slo_s > 0):
        msg = f"tbt_slo_s must be a finite number > 0, got {tbt_slo_s}"
        raise InvalidInputError(msg, field="tbt_slo_s", value=tbt_slo_s)
    return last_batch_end_s + tbt_slo_s - delta * tbar_s


def is_critical(*, now_s: float, last_schedulable_s: float) -> bool:
    """Return True when a decode must join the batch built at ``now_s`` (paper §6: t_m >= C_ij)."""
    return now_s >= last_schedulable_s


def deferral_window_s(*, tbt_slo_s: float, delta: float, tbar_s: float) -> float:
    """Return W_k = TBT_k - delta * tbar in seconds (spec §3.4); <= 0 means never deferred.

    Raises:
        InvalidInputError: a non-finite argument or a negative delta or tbar.
    """
    _require_finite("tbt_slo_s", tbt_slo_s)
    _require_non_negative("delta", delta)
    _require_non_negative("tbar_s", tbar_s)
    return tbt_slo_s - delta * tbar_s


def safety_floor_delta(*, step_time_p99_s: float, tbar_s: float) -> float:
    """Return delta_min = 2 * T_B,p99 / tbar (spec §3.4), the least delta that still covers two batches.

    Raises:
        InvalidInputError: ``tbar_s`` is not > 0 or ``step_time_p99_s`` is negative or not finite.
    """
    _require_non_negative("step_time_p99_s", step_time_p99_s)
    if not (math.isfinite(tbar_s) and tbar_s > 0):
        msg = f"tbar_s must be a finite number > 0, got {tbar_s}"
        raise InvalidInputError(msg, field="tbar_s", value=tbar_s)
    return 2.0 * step_time_p99_s / tbar_s


def _require_finite(name: str, value: float) -> None:
    if not math.isfinite(value):
        msg = f"{name} must be finite, got {value}"
        raise InvalidInputError(msg, field=name, value=value)


def _require_non_negative(name: str, value: float) -> None:
    if not (math.isfinite(value) and value >= 0):
        msg = f"{name} must be a finite number >= 0, got {value}"
        raise InvalidInputError(msg, field=name, value=value)
