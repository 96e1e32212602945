"""EMA and EB+'s asymmetric N_obs EMA (seed-001 section 4.3)."""

from __future__ import annotations

import math

import pytest

from estimators.ema import AsymmetricEma, Ema
from schemas.errors import InvalidInputError


class TestEma:
    def test_first_update_assigns_then_smooths(self) -> None:
        e = Ema(alpha=0.3)
        assert e.update(10.0) == 10.0
        assert e.update(20.0) == pytest.approx(13.0)
        assert Ema.from_dict(e.to_dict()).snapshot() == e.snapshot()

    def test_nan_raises(self) -> None:
        with pytest.raises(InvalidInputError, match="value"):
            Ema(alpha=0.3).update(math.nan)


class TestAsymmetricEma:
    def test_rises_fast_and_falls_slowly(self) -> None:
        """N_obs from max_num_seqs = 256: up with alpha 0.3, down with alpha 0.03."""
        n_obs = AsymmetricEma(initial=256.0)
        assert n_obs.update(1256.0) == pytest.approx(256.0 + 0.3 * 1000.0)
        assert n_obs.update(0.0) == pytest.approx(556.0 * 0.97)
        back = AsymmetricEma.from_dict(n_obs.to_dict())
        assert back.snapshot() == n_obs.snapshot()
        assert back.snapshot().n_updates == 2
