"""How many records a partition loop takes per poll: as many as it can fold well within its poll interval.

A group member that does not poll again within ``max_poll_interval_ms`` is taken out of its group
by its client and must join again (on Tansu a join waits out the rebalance timeout and the broker's
initial delay, about 8 s). A fixed ``max_poll_records`` of 2,000 needs 400 folds a second to stay
within the local broker's 5 s interval; on a loaded machine (a 5-minute soak at 3,000 events/s on
Apache Kafka, two shared cores at load average about 20) the processor folded 130 to 300 events a
second, left its group 63 times and was assigned its partitions 73 times. The sizer shrinks the
batch when a poll's work took more than a quarter of the interval and grows it back when it took
less than half of that.
"""

from __future__ import annotations

MIN_BATCH_RECORDS = 50


class BatchSizer:
    """The record count of the next poll, from how long the last batches took to fold and commit."""

    def __init__(self, *, max_records: int, max_poll_interval_s: float) -> None:
        self.max_records = max_records
        self.records = max_records
        self._target_s = max_poll_interval_s / 4.0

    def observe(self, records: int, elapsed_s: float) -> int:
        """Record that ``records`` took ``elapsed_s`` seconds of work; return the next poll's record count.

        Only a full batch says how fast folding goes: a short one (a quiet log) leaves the count as it is.
        """
        if elapsed_s > self._target_s:
            rate_per_s = records / elapsed_s
            self.records = max(MIN_BATCH_RECORDS, min(self.records, int(rate_per_s * self._target_s)))
        elif records >= self.records and elapsed_s < self._target_s / 2.0:
            self.records = min(self.max_records, max(self.records + 1, int(self.records * 1.25)))
        return self.records
