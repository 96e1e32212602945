"""Moving event building off the engine's step path changed no event: same inputs, same JSON, byte for byte.

The golden file was written by the stream as it was when every event was built on the caller's
thread (commit e493519), but for its two step reports' ``scheduler_mode``: ``MB`` rather than ``mb``
since EB+'s modes were spelt one way (``EbplusMode``). The deferred stream builds them on the
thread that drains it (the publisher's, in an engine) and must give the same bytes, as must the
synchronous stream.
"""

from __future__ import annotations

import threading
from pathlib import Path

from schemas.events import encode_event
from schemas.policy_docs.ebplus import EbplusMode
from services.engines.stream import EngineStream
from services.engines.vllm.drive import pinned_ebplus
from services.sdk.envelope import EnvelopeStamper
from services.sdk.protocol import ListSink
from tests.unit.engines.stream_scenario import drive

GOLDEN = Path(__file__).parent / "data" / "stream_events.jsonl"


def _events(*, deferred: bool) -> tuple[list[str], EngineStream]:
    sink = ListSink()
    stamper = EnvelopeStamper(engine_id="vllm-7", deployment="dep", source_epoch=1_700_000_000_000)
    stream = EngineStream(stamper=stamper, sink=sink, deferred=deferred)
    drive(stream, pinned_ebplus("dep", "vllm-7", 3, EbplusMode.EB, now_s=100.0))
    return [encode_event(event).decode() for event in sink.events], stream


def _golden() -> list[str]:
    return GOLDEN.read_text().splitlines()


class TestStreamGolden:
    def test_the_synchronous_stream_gives_the_golden_events(self) -> None:
        events, stream = _events(deferred=False)
        assert events == _golden()
        assert stream.rejected == 2  # the huge prompt's arrival and the 5000 s step

    def test_the_deferred_stream_gives_nothing_until_drained_then_the_golden_events(self) -> None:
        sink = ListSink()
        stamper = EnvelopeStamper(engine_id="vllm-7", deployment="dep", source_epoch=1_700_000_000_000)
        stream = EngineStream(stamper=stamper, sink=sink, deferred=True)
        drive(stream, pinned_ebplus("dep", "vllm-7", 3, EbplusMode.EB, now_s=100.0))
        assert sink.events == []
        assert stream.pending()
        assert stream.policy_versions == {"ebplus": 3}  # the step path sees its ack at once
        stream.drain()
        assert not stream.pending()
        assert [encode_event(event).decode() for event in sink.events] == _golden()

    def test_a_drain_on_another_thread_gives_the_golden_events(self) -> None:
        sink = ListSink()
        stamper = EnvelopeStamper(engine_id="vllm-7", deployment="dep", source_epoch=1_700_000_000_000)
        stream = EngineStream(stamper=stamper, sink=sink, deferred=True)
        done = threading.Event()

        def drain_until_done() -> None:
            while not done.is_set() or stream.pending():
                stream.drain()

        drainer = threading.Thread(target=drain_until_done)
        drainer.start()
        drive(stream, pinned_ebplus("dep", "vllm-7", 3, EbplusMode.EB, now_s=100.0))
        done.set()
        drainer.join(timeout=10.0)
        assert [encode_event(event).decode() for event in sink.events] == _golden()
