"""The SLAI offset rule: fixed delta, or the dynamic KV-threshold switch (paper §7.1, spec §3.3).

    delta = delta_lo  if KV-block use <  kv_threshold   (favour prefill-phase requests)
            delta_hi  otherwise                           (favour decode-phase iterations)

with the paper's values 5 / 10 / 0.96. KV use is used KV blocks / total KV blocks after the batch
(spec §8 P4), not device memory. The engine evaluates this every batch with the parameters the
control plane pushed; the control plane evaluates it only for diagnostics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from policies.slai.params import OffsetMode, SlaiParams
from schemas.errors import InvalidInputError
from schemas.policy_docs.slai import SlaiPayload


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetRule:
    """The pushed rule an engine turns into the delta of its next last-schedulable times.

    Attributes:
        mode: fixed or dynamic.
        delta_fixed: delta in fixed mode (multiple of tbar, dimensionless).
        delta_lo: dynamic delta below ``kv_threshold_frac``.
        delta_hi: dynamic delta at or above ``kv_threshold_frac``.
        kv_threshold_frac: KV-block use of the switch, compared with >= (repo semantics, spec §8 P4).
        delta_override: when not None, the delta in every mode.
    """

    mode: OffsetMode
    delta_fixed: float
    delta_lo: float
    delta_hi: float
    kv_threshold_frac: float
    delta_override: float | None = None

    @classmethod
    def from_params(cls, params: SlaiParams) -> OffsetRule:
        """Return the rule of ``params`` (the paper's defaults unless overridden)."""
        return cls(
            mode=params.offset_mode,
            delta_fixed=params.delta_fixed,
            delta_lo=params.delta_lo,
            delta_hi=params.delta_hi,
            kv_threshold_frac=params.kv_threshold_frac,
            delta_override=params.delta_override,
        )


def offset_for_kv_use(kv_use_frac: float, rule: OffsetRule) -> float:
    """Return delta for the current KV-block use under ``rule`` (paper §7.1).

    Args:
        kv_use_frac: used / total KV blocks after the last batch, in [0, 1].
        rule: the pushed offset rule.

    Returns:
        delta (dimensionless): the override if set, ``delta_fixed`` in fixed mode, else
        ``delta_hi`` when ``kv_use_frac >= kv_threshold_frac`` and ``delta_lo`` below it.

    Raises:
        InvalidInputError: ``kv_use_frac`` is not a number in [0, 1].
    """
    if not (math.isfinite(kv_use_frac) and 0.0 <= kv_use_frac <= 1.0):
        msg = f"kv_use_frac must be in [0, 1], got {kv_use_frac}"
        raise InvalidInputError(msg, field="kv_use_frac", value=kv_use_frac)
    if rule.delta_override is not None:
        return rule.delta_override
    if rule.mode is OffsetMode.FIXED:
        return rule.delta_fixed
    return rule.delta_hi if kv_use_frac >= rule.kv_threshold_frac else rule.delta_lo


def offset_rule_of(payload: SlaiPayload) -> OffsetRule:
    """Return the engine-side offset rule a pushed payload encodes."""
    return OffsetRule(
        mode=OffsetMode(payload.mode),
        delta_fixed=payload.delta_fixed,
        delta_lo=payload.delta_lo,
        delta_hi=payload.delta_hi,
        kv_threshold_frac=payload.kv_threshold_frac,
        delta_override=payload.delta_override,
    )
