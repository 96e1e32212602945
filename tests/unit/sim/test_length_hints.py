"""Output-length hints for the BF-IO router: the true length, or within the stated relative error."""

from __future__ import annotations

import pytest

from schemas.errors import InvalidInputError
from services.sim.length_hints import LengthHints
from services.sim.request import RequestSpec, SimRequest


def _request(index: int, output_tokens: int = 200, max_tokens: int | None = None) -> SimRequest:
    spec = RequestSpec(
        request_id=f"r{index}", arrival_s=0.0, prompt_tokens=10, output_tokens=output_tokens, max_tokens=max_tokens
    )
    return SimRequest(spec)


class TestLengthHints:
    def test_without_error_the_hint_is_the_length_the_request_will_generate(self) -> None:
        hints = LengthHints()
        assert hints.hint_tokens(_request(0)) == 200.0
        assert hints.hint_tokens(_request(1, max_tokens=50)) == 50.0

    def test_noisy_hints_stay_within_the_error_and_spread_over_it(self) -> None:
        """e = 0.2 on 200 tokens: every hint in [160, 240], both halves of the range reached."""
        hints = LengthHints(error_frac=0.2, seed=3)
        values = [hints.hint_tokens(_request(i)) for i in range(500)]
        assert min(values) >= 160.0
        assert max(values) <= 240.0
        assert min(values) < 180.0
        assert max(values) > 220.0

    def test_a_request_gets_the_same_hint_at_every_step_and_another_seed_another(self) -> None:
        request = _request(7)
        assert LengthHints(error_frac=0.5, seed=1).hint_tokens(request) == LengthHints(
            error_frac=0.5, seed=1
        ).hint_tokens(request)
        draws = {LengthHints(error_frac=0.5, seed=s).hint_tokens(request) for s in range(20)}
        assert len(draws) > 1

    def test_a_hint_is_at_least_one_token(self) -> None:
        assert all(
            LengthHints(error_frac=0.9, seed=s).hint_tokens(_request(s, output_tokens=1)) >= 1.0 for s in range(50)
        )

    @pytest.mark.parametrize("error_frac", [-0.1, 1.0, float("nan")])
    def test_an_error_outside_zero_to_one_is_refused(self, error_frac: float) -> None:
        with pytest.raises(InvalidInputError, match="error_frac"):
            LengthHints(error_frac=error_frac)
