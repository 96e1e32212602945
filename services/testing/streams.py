"""A small, seeded synthetic telemetry stream: engines that register, take requests, step and finish.

It is not a simulator (services/sim is); it only produces valid, ordered event streams with the
statistics the estimators need (geometric output lengths, some censored finishes, mixed batches).
"""

from __future__ import annotations

from typing import Literal, TypedDict

import numpy as np

from schemas.engines import EngineRegistered
from schemas.events import Event
from schemas.requests import RequestArrived, RequestFinished, RequestFirstToken
from schemas.steps import StepReport
from services.testing.models import changed


class Envelope(TypedDict):
    """The envelope fields every event of a stream carries."""

    event_id: str
    ts: float
    deployment: str
    engine_id: str
    seq: int


BATCH_KINDS: tuple[Literal["prefill", "decode", "mixed"], ...] = ("prefill", "decode", "mixed")


def synthetic_stream(*, engines: int = 2, requests: int = 400, seed: int = 7, deployment: str = "dep") -> list[Event]:
    """Return a time-ordered stream of ``requests`` requests spread over ``engines`` engines."""
    rng = np.random.default_rng(seed)
    events: list[Event] = []
    seq = dict.fromkeys(range(engines), 0)

    def envelope(engine: int, ts: float) -> Envelope:
        seq[engine] += 1
        return {
            "event_id": f"e{engine}-{seq[engine]}",
            "ts": ts,
            "deployment": deployment,
            "engine_id": f"eng-{engine}",
            "seq": seq[engine],
        }

    for engine in range(engines):
        events.append(
            EngineRegistered(
                model="Qwen3-8B",
                gpu="H200",
                hardware_profile="qwen3-8b@h200",
                max_num_seqs=256,
                max_num_batched_tokens=8192,
                max_model_len=32768,
                kv_blocks_total=20_000,
                block_size_tokens=16,
                **envelope(engine, 0.0),
            )
        )
    ts = 0.0
    for i in range(requests):
        engine = i % engines
        ts += float(rng.exponential(0.05))
        prompt = int(rng.integers(64, 1024))
        output = int(rng.geometric(1 / 200))
        censored = output > 600
        events.append(
            RequestArrived(
                request_id=f"r{i}",
                prompt_tokens=prompt,
                max_tokens=600,
                tier="free",
                tbt_slo_s=0.5,
                **envelope(engine, ts),
            )
        )
        running = int(rng.integers(1, 200))
        waiting = int(rng.integers(0, 50))
        kind = BATCH_KINDS[i % 3]
        prefill_tokens = 0 if kind == "decode" else prompt
        decodes = 0 if kind == "prefill" else running
        duration = 0.008 + 2.5e-5 * prefill_tokens + 4.5e-5 * decodes + float(rng.normal(0, 1e-4)) ** 2
        events.append(
            StepReport(
                step_id=i,
                duration_s=duration,
                batch_kind=kind,
                num_prefill_requests=1 if prefill_tokens else 0,
                sum_prefill_tokens=prefill_tokens,
                num_decode_requests=decodes,
                sum_decode_kv_tokens=decodes * 700,
                num_running=running,
                num_waiting=waiting,
                kv_blocks_used=int(rng.integers(0, 20_000)),
                kv_blocks_total=20_000,
                **envelope(engine, ts + 0.001),
            )
        )
        events.append(
            RequestFinished(
                request_id=f"r{i}",
                prompt_tokens=prompt,
                output_tokens=min(output, 600),
                finish_reason="length" if censored else "stop",
                tier="free",
                tbt_slo_s=0.5,
                arrived_ts=ts,
                ttft_s=0.2,
                tbt_mean_s=0.03,
                tbt_p99_s=0.08,
                tbt_max_s=0.1,
                tbt_gaps=min(output, 600),
                tbt_gaps_over_slo=0,
                **envelope(engine, ts + 0.002),
            )
        )
    return events


def restart_case(deployment: str) -> tuple[list[Event], list[Event], Event, Event]:
    """One engine's stream that restarts, for the event guard's tests: (first, restarted, future, stale).

    ``first`` is the old producer generation's first 150 events; ``restarted`` the rest, sent again by
    a new generation (``source_epoch`` 1, ``seq`` from 0, new event ids); ``future`` lies 700 s ahead
    of ``first``; ``stale`` is an event of the old generation sent after the restart.
    """
    valid = synthetic_stream(engines=1, requests=80, deployment=deployment, seed=6)
    first, second = valid[:150], valid[150:]
    restarted = [changed(e, source_epoch=1, seq=i, event_id=f"{e.event_id}-restarted") for i, e in enumerate(second)]
    future = changed(first[-1], ts=first[-1].ts + 700.0, event_id="from-the-future")
    stale = changed(first[-1], event_id="old-epoch", ts=restarted[5].ts)
    return first, restarted, future, stale


def long_requests_still_running() -> list[Event]:
    """40 requests start together; the 20 short ones finish at 4 tokens, the 20 long ones are still
    running after 60 decode steps (their true lengths are 1,000 tokens)."""
    seq = 0

    def envelope(ts: float) -> Envelope:
        nonlocal seq
        seq += 1
        return {"event_id": f"e{seq}", "ts": ts, "deployment": "dep", "engine_id": "eng-0", "seq": seq}

    events: list[Event] = []
    ids = [f"r{i}" for i in range(40)]
    for request_id in ids:
        events.append(RequestArrived(request_id=request_id, prompt_tokens=100, **envelope(0.0)))
    running = set(ids)
    for step in range(61):
        ts = 0.01 * (step + 1)
        for request_id in ids if step == 0 else ():
            events.append(RequestFirstToken(request_id=request_id, ttft_s=ts, **envelope(ts)))
        for request_id in ids[:20] if step == 3 else ():
            running.discard(request_id)
            events.append(
                RequestFinished(
                    request_id=request_id,
                    prompt_tokens=100,
                    output_tokens=4,
                    finish_reason="stop",
                    arrived_ts=0.0,
                    **envelope(ts),
                )
            )
        prefill = 4000 if step == 0 else 0
        events.append(
            StepReport(
                step_id=step,
                duration_s=0.01,
                batch_kind="prefill" if step == 0 else "decode",
                num_prefill_requests=40 if step == 0 else 0,
                sum_prefill_tokens=prefill,
                num_decode_requests=0 if step == 0 else len(running) + (20 if step == 3 else 0),
                sum_decode_kv_tokens=0 if step == 0 else 100 * len(running),
                num_running=len(running),
                num_waiting=0,
                kv_blocks_used=10,
                kv_blocks_total=1000,
                **envelope(ts),
            )
        )
    return events
