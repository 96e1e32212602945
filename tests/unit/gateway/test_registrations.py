"""Reading engines' lifecycle and step events from gov.telemetry records: the filter and the contract check."""

from __future__ import annotations

from schemas.engines import EngineRegistered, Heartbeat
from schemas.events import encode_event
from schemas.requests import RequestFirstToken
from services.gateway.registrations import feed_events
from services.testing.models import changed
from tests.unit.gateway.steps import step

ENVELOPE = {"ts": 5.0, "engine_id": "e0", "seq": 0}


def _registration(deployment: str) -> EngineRegistered:
    return EngineRegistered(
        event_id=f"reg-{deployment}",
        deployment=deployment,
        model="m",
        gpu="cpu",
        max_num_seqs=4,
        max_num_batched_tokens=512,
        max_model_len=512,
        kv_blocks_total=10,
        block_size_tokens=16,
        endpoint_url="http://127.0.0.1:8000",
        **ENVELOPE,  # type: ignore[arg-type]
    )


class TestFeedEvents:
    def test_keeps_the_deployments_registrations_and_heartbeats_only(self) -> None:
        heartbeat = Heartbeat(event_id="hb", deployment="prod", num_running=1, num_waiting=0, **ENVELOPE)  # type: ignore[arg-type]
        other = RequestFirstToken(event_id="ft", deployment="prod", request_id="r", ttft_s=0.1, **ENVELOPE)  # type: ignore[arg-type]
        values = [
            encode_event(_registration("prod")),
            encode_event(_registration("staging")),
            encode_event(heartbeat),
            encode_event(other),
            None,
        ]
        events, invalid = feed_events([(b"e0", value) for value in values], "prod")
        assert [(type(e).__name__, e.deployment) for e in events] == [
            ("EngineRegistered", "prod"),
            ("Heartbeat", "prod"),
        ]
        assert invalid == 0

    def test_an_invalid_registration_is_counted_and_skipped(self) -> None:
        bad = b'{"event_type": "engine.registered", "engine_id": "e0"}'
        events, invalid = feed_events([(b"e0", bad)], "prod")
        assert (events, invalid) == ([], 1)

    def test_of_each_engines_steps_in_a_poll_only_the_last_is_kept(self) -> None:
        """Steps come tens of times a second per engine; the gateway needs each engine's latest load only."""
        steps = [step(10.0 + n, running=n + 1, kv_blocks=1, seq=n) for n in range(3)]
        other = changed(step(10.5, running=7, kv_blocks=1, seq=9), engine_id="r1")
        records = [(b"r0", encode_event(s)) for s in steps] + [(b"r1", encode_event(other))]
        events, invalid = feed_events(records, "prod")
        assert [(type(e).__name__, e.engine_id, getattr(e, "num_running", None)) for e in events] == [
            ("StepReport", "r0", 3),
            ("StepReport", "r1", 7),
        ]
        assert invalid == 0
