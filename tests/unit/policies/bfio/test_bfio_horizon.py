"""The horizon grid and its weights."""

from __future__ import annotations

import numpy as np
import pytest

from policies.bfio.horizon import build_horizon_grid
from policies.bfio.params import WeightScheme
from schemas.errors import InvalidInputError


class TestBuildHorizonGrid:
    def test_full_uniform_grid_is_every_offset_with_weight_one(self) -> None:
        grid = build_horizon_grid(3, dyadic=False, scheme=WeightScheme.UNIFORM, decay_gamma=0.5)
        np.testing.assert_array_equal(grid.offsets_steps, [0, 1, 2, 3])
        np.testing.assert_array_equal(grid.weights, [1, 1, 1, 1])

    def test_dyadic_grid_weights_are_block_sums_that_add_up_to_h_plus_one(self) -> None:
        grid = build_horizon_grid(20, dyadic=True, scheme=WeightScheme.UNIFORM, decay_gamma=0.5)
        np.testing.assert_array_equal(grid.offsets_steps, [0, 1, 2, 4, 8, 16, 20])
        np.testing.assert_array_equal(grid.weights, [1, 1, 2, 4, 8, 4, 1])

    def test_decay_weights_sum_the_geometric_terms_of_each_block(self) -> None:
        grid = build_horizon_grid(4, dyadic=True, scheme=WeightScheme.DECAY, decay_gamma=0.5)
        np.testing.assert_array_equal(grid.offsets_steps, [0, 1, 2, 4])
        np.testing.assert_allclose(grid.weights, [1.0, 0.5, 0.25 + 0.125, 0.0625])

    def test_h_zero_is_the_single_current_step(self) -> None:
        grid = build_horizon_grid(0, dyadic=True, scheme=WeightScheme.UNIFORM, decay_gamma=0.5)
        assert grid.size == 1
        np.testing.assert_array_equal(grid.weights, [1.0])

    def test_negative_horizon_is_refused(self) -> None:
        with pytest.raises(InvalidInputError, match="horizon_steps"):
            build_horizon_grid(-1, dyadic=True, scheme=WeightScheme.UNIFORM, decay_gamma=0.5)
