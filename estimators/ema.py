"""Exponential moving averages, plain and asymmetric (EB+'s N_obs).

Sources: seed-001-ebplus.md section 4.3 (N_obs = EMA of running + waiting with alpha 0.3 when demand
rises above it and 0.03 when it falls, initialised at max_num_seqs) and section 3.1 (mu_L: EMA 0.05;
mu_O: EMA 0.2 of batch means; theta: EMA 0.3, first update assigned directly).

EMAs are order-dependent, so they have no ``merge``: an EMA belongs to one ordered stream (one engine).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from estimators._input import check_format, require_finite, require_fraction

N_OBS_ALPHA_UP = 0.3  # seed-001 section 4.3: fast up
N_OBS_ALPHA_DOWN = 0.03  # seed-001 section 4.3: slow down


@dataclass(frozen=True, slots=True, kw_only=True)
class EmaSnapshot:
    """Current EMA value (None before the first update and without an initial value) and update count."""

    value: float | None
    n_updates: int


class Ema:
    """x <- x + alpha (v - x); with no initial value the first update assigns v directly.

    Bad input: a NaN or infinite value raises ``InvalidInputError``.
    """

    __slots__ = ("_n", "_value", "alpha")

    def __init__(self, *, alpha: float, initial: float | None = None) -> None:
        """Create an EMA with smoothing ``alpha`` in [0, 1] and an optional initial value."""
        self.alpha = require_fraction("alpha", alpha)
        self._value = None if initial is None else require_finite("initial", initial)
        self._n = 0

    def update(self, value: float) -> float:
        """Fold one value and return the new EMA."""
        v = require_finite("value", value)
        self._value = v if self._value is None else self._value + self.alpha * (v - self._value)
        self._n += 1
        return self._value

    def snapshot(self) -> EmaSnapshot:
        """The current value and update count."""
        return EmaSnapshot(value=self._value, n_updates=self._n)

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible state (format 1)."""
        return {"kind": "ema", "format": 1, "alpha": self.alpha, "value": self._value, "n": self._n}

    @classmethod
    def from_dict(cls, data: object) -> Ema:
        """Rebuild from ``to_dict`` output; raises ``InvalidInputError`` on a wrong kind or format."""
        d = check_format(data, kind="ema", version=1)
        out = cls(alpha=float(d["alpha"]), initial=None if d["value"] is None else float(d["value"]))
        out._n = int(d["n"])
        return out


class AsymmetricEma:
    """EMA with one alpha when the value rises above the average and another when it falls.

    EB+'s N_obs (seed-001 section 4.3): alpha_up = 0.3 if v > x else alpha_down = 0.03, so the
    average follows surges quickly and drains slowly. Without an initial value the first update
    assigns v directly (the code starts at max_num_seqs: pass it as ``initial``).

    Bad input: a NaN or infinite value raises ``InvalidInputError``.
    """

    __slots__ = ("_n", "_value", "alpha_down", "alpha_up")

    def __init__(
        self, *, alpha_up: float = N_OBS_ALPHA_UP, alpha_down: float = N_OBS_ALPHA_DOWN, initial: float | None = None
    ) -> None:
        """Create the EMA (alphas in [0, 1])."""
        self.alpha_up = require_fraction("alpha_up", alpha_up)
        self.alpha_down = require_fraction("alpha_down", alpha_down)
        self._value = None if initial is None else require_finite("initial", initial)
        self._n = 0

    def update(self, value: float) -> float:
        """Fold one value and return the new average."""
        v = require_finite("value", value)
        if self._value is None:
            self._value = v
        else:
            alpha = self.alpha_up if v > self._value else self.alpha_down
            self._value += alpha * (v - self._value)
        self._n += 1
        return self._value

    def snapshot(self) -> EmaSnapshot:
        """The current value and update count."""
        return EmaSnapshot(value=self._value, n_updates=self._n)

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible state (format 1)."""
        return {
            "kind": "asymmetric_ema",
            "format": 1,
            "alpha_up": self.alpha_up,
            "alpha_down": self.alpha_down,
            "value": self._value,
            "n": self._n,
        }

    @classmethod
    def from_dict(cls, data: object) -> AsymmetricEma:
        """Rebuild from ``to_dict`` output; raises ``InvalidInputError`` on a wrong kind or format."""
        d = check_format(data, kind="asymmetric_ema", version=1)
        out = cls(
            alpha_up=float(d["alpha_up"]),
            alpha_down=float(d["alpha_down"]),
            initial=None if d["value"] is None else float(d["value"]),
        )
        out._n = int(d["n"])
        return out
