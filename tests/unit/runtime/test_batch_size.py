"""services/runtime/batch_size.py: a batch folds within a quarter of the poll interval."""

from __future__ import annotations

from services.runtime.batch_size import MIN_BATCH_RECORDS, BatchSizer


class TestBatchSizer:
    def test_starts_at_the_configured_maximum(self) -> None:
        assert BatchSizer(max_records=2000, max_poll_interval_s=5.0).records == 2000

    def test_a_slow_batch_shrinks_the_next_to_what_folds_in_a_quarter_of_the_interval(self) -> None:
        """2,000 records in 10 s is 200 a second: a 1.25 s target allows 250."""
        sizer = BatchSizer(max_records=2000, max_poll_interval_s=5.0)
        assert sizer.observe(2000, 10.0) == 250

    def test_never_below_the_floor(self) -> None:
        sizer = BatchSizer(max_records=2000, max_poll_interval_s=5.0)
        assert sizer.observe(2000, 600.0) == MIN_BATCH_RECORDS

    def test_a_fast_full_batch_grows_the_next_up_to_the_maximum(self) -> None:
        sizer = BatchSizer(max_records=2000, max_poll_interval_s=5.0)
        sizer.observe(2000, 10.0)
        sizes = [sizer.observe(sizer.records, 0.1) for _ in range(20)]
        assert sizes[0] == 312
        assert sizes[-1] == 2000
        assert sizes == sorted(sizes)

    def test_a_short_batch_from_a_quiet_log_leaves_the_size_alone(self) -> None:
        sizer = BatchSizer(max_records=2000, max_poll_interval_s=5.0)
        sizer.observe(2000, 10.0)
        assert sizer.observe(12, 0.01) == 250
