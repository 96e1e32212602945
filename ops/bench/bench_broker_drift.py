"""The local broker's drift: a bare reader's lag over a long publishing run, with the producer's acknowledgements.

Why: the event -> policy latency of ``bench_runtime.py`` grew with the length of its runs, and its
no-work floor (``relay.py``) did too. This isolates the broker: fleet-8 telemetry published at
``--rate`` events/s by one kafka-python producer (linger 5 ms, ``acks=1``) to a fresh broker's
``gov.telemetry``, and read by a bare kafka-python reader in a process of its own (fetch wait 10 ms,
as the services'). Per ``--slice`` seconds it prints the reader's median lag (receipt minus the
record's CreateTime) and the producer's median send -> acknowledgement time. A lag that grows while
the acknowledgements stay flat is the broker's fetch path, not the clients or Governor.

    PYTHONPATH=. python ops/bench/bench_broker_drift.py [--rate 1000] [--seconds 45] [--slice 5]
        [--out out/bench/broker_drift.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from kafka import KafkaProducer

from ops.bench.backlog import first_fleet_events
from ops.bench.relay import end_reader
from schemas.events import encode_event
from schemas.names import TELEMETRY_TOPIC
from services.settings import LOCAL_BROKER_TIMEOUTS, Settings
from services.stack.launcher import stack_down, stack_up
from services.stack.processes import free_port


def read_lags(bootstrap: str, seconds: float, slice_s: float) -> list[dict[str, float]]:
    """Read ``gov.telemetry`` from its end for ``seconds``; the median lag and count of each slice."""
    consumer = end_reader(bootstrap, TELEMETRY_TOPIC, LOCAL_BROKER_TIMEOUTS.fetch_max_wait_ms)
    print("ready", flush=True)
    slices: list[dict[str, float]] = []
    lags: list[float] = []
    started = time.time()
    while time.time() - started < seconds:
        for records in consumer.poll(timeout_ms=200).values():
            now = time.time()
            lags.extend(now - record.timestamp / 1000.0 for record in records)
        if time.time() - started >= slice_s * (len(slices) + 1):
            slices.append({"lag_p50_ms": float(np.median(lags)) * 1000.0 if lags else 0.0, "records": len(lags)})
            lags = []
    consumer.close()
    return slices


def main() -> int:
    """Publish on a fresh broker with a reader in its own process; print and write the drift."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=1000.0, help="events published per second")
    parser.add_argument("--seconds", type=float, default=45.0, help="seconds of publishing")
    parser.add_argument("--slice", type=float, default=5.0, help="seconds per printed slice")
    parser.add_argument("--read", help=argparse.SUPPRESS)  # the reader's own process: its bootstrap
    parser.add_argument("--out", type=Path, default=Path("out/bench/broker_drift.json"))
    args = parser.parse_args()
    if args.read:
        print(json.dumps(read_lags(args.read, args.seconds + 5.0, args.slice)), flush=True)
        return 0
    state_dir = Path(tempfile.mkdtemp(prefix="governor-bench-drift-"))
    state = stack_up(state_dir, Settings.load({}).redis_url, free_port())
    try:
        events = first_fleet_events("bench-drift", int(args.rate * args.seconds))
        reading = ["--read", state.kafka_bootstrap, "--seconds", str(args.seconds), "--slice", str(args.slice)]
        reader = subprocess.Popen(
            [sys.executable, __file__, *reading],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert reader.stdout is not None
        reader.stdout.readline()  # "ready": positioned at the end
        producer = KafkaProducer(bootstrap_servers=state.kafka_bootstrap, linger_ms=5, acks=1)
        acks: list[tuple[float, float]] = []
        started = time.perf_counter()
        for i, event in enumerate(events):
            wait = started + i / args.rate - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            sent = time.perf_counter()
            future = producer.send(TELEMETRY_TOPIC, key=event.engine_id.encode(), value=encode_event(event))
            future.add_callback(lambda _, sent=sent: acks.append((sent - started, time.perf_counter() - sent)))
        producer.flush()
        producer.close()
        slices = json.loads(reader.stdout.readline())
        reader.wait(timeout=60)
    finally:
        stack_down(state_dir)
    ack_times = np.asarray(acks)
    for k, cut in enumerate(slices):
        in_slice = ack_times[(ack_times[:, 0] >= k * args.slice) & (ack_times[:, 0] < (k + 1) * args.slice), 1]
        cut["ack_p50_ms"] = float(np.median(in_slice)) * 1000.0 if len(in_slice) else 0.0
        print(
            f"{k * args.slice:5.0f}-{(k + 1) * args.slice:.0f} s: reader lag p50 {cut['lag_p50_ms']:6.1f} ms over "
            f"{cut['records']:5.0f} records, producer ack p50 {cut['ack_p50_ms']:5.1f} ms"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"rate": args.rate, "seconds": args.seconds, "slices": slices}, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
