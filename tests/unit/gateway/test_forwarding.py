"""The SSE tally that turns streamed chunks into generated tokens of the in-flight load."""

from __future__ import annotations

from services.gateway.forwarding import SseTally


class TestSseTally:
    def test_counts_events_split_across_chunks_and_skips_done(self) -> None:
        stream = b'data: {"a": 1}\n\ndata: {"a": 2}\n\ndata: [DONE]\n\n'
        for size in (1, 3, 7, len(stream)):
            tally = SseTally()
            for start in range(0, len(stream), size):
                tally.feed(stream[start : start + size])
            assert tally.events == 2, size
