"""The local brokers side by side: start time and memory of Apache Kafka (KRaft, one JVM) and Tansu.

Each round starts a broker on a free port in a fresh state folder with ``start_broker`` (what
``governor stack up`` runs), creates the topics of schemas/names.py with ``create_topics`` and
stops there: "ready" is the wall time from the start call until the topics exist, the point at
which ``stack up`` returns. Kafka is then stopped and started again on the same folder
("restart": its log is kept, so no format, and the topics are found rather than created). RSS is
VmRSS from /proc, read once the broker is ready and again after ``--records`` telemetry-sized
records (about 300 bytes) were produced and read back. No Redis is involved.

    PYTHONPATH=. python ops/bench/bench_broker_start.py [--rounds 3] [--records 20000]
        [--out out/bench/broker_start.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from kafka import KafkaConsumer, KafkaProducer

from schemas.names import TELEMETRY_TOPIC
from services.stack.kafka_broker import KAFKA_STOP_TIMEOUT_S
from services.stack.launcher import STOP_TIMEOUT_S, BrokerKind, create_topics, start_broker
from services.stack.processes import free_port, stop

RECORD_BYTES = 300


def _rss_mib(pid: int) -> float:
    """VmRSS of ``pid``, MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    msg = f"no VmRSS for pid {pid}"
    raise RuntimeError(msg)


def _ready_s(state_dir: Path, broker: BrokerKind) -> tuple[float, str, int]:
    """Start ``broker`` in ``state_dir`` and create the topics; return the seconds it took, bootstrap and pid."""
    started = time.perf_counter()
    bootstrap, pid = start_broker(state_dir, free_port(), broker)
    create_topics(bootstrap, 60.0, new_broker=broker == "tansu")
    return time.perf_counter() - started, bootstrap, pid


def _load(bootstrap: str, records: int) -> None:
    """Produce ``records`` records to the telemetry topic and read them all back."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    value = b"x" * RECORD_BYTES
    for i in range(records):
        producer.send(TELEMETRY_TOPIC, key=f"eng-{i % 8}".encode(), value=value)
    producer.flush(timeout=60)
    producer.close()
    consumer = KafkaConsumer(
        TELEMETRY_TOPIC, bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=10_000
    )
    read = sum(1 for _ in consumer)
    consumer.close()
    if read != records:
        msg = f"read {read} of {records} records back"
        raise RuntimeError(msg)


def _round(broker: BrokerKind, records: int) -> dict[str, float]:
    """One start (and for Kafka one restart) of ``broker``: seconds to ready, RSS ready and loaded, MiB."""
    stop_s = KAFKA_STOP_TIMEOUT_S if broker == "kafka" else STOP_TIMEOUT_S
    with tempfile.TemporaryDirectory(prefix=f"bench-{broker}-") as folder:
        state_dir = Path(folder)
        ready_s, bootstrap, pid = _ready_s(state_dir, broker)
        figures = {"ready_s": ready_s, "rss_ready_mib": _rss_mib(pid)}
        _load(bootstrap, records)
        figures["rss_loaded_mib"] = _rss_mib(pid)
        stop(pid, stop_s)
        if broker == "kafka":
            restart_s, _, pid = _ready_s(state_dir, broker)
            figures["restart_ready_s"] = restart_s
            stop(pid, stop_s)
    return figures


def main() -> int:
    """Run the rounds for both brokers, print the medians and write every round as JSON."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--out", type=Path, default=Path("out/bench/broker_start.json"))
    args = parser.parse_args()
    brokers: tuple[BrokerKind, ...] = ("tansu", "kafka")
    rounds = {broker: [_round(broker, args.records) for _ in range(args.rounds)] for broker in brokers}
    medians = {
        broker: {name: statistics.median(run[name] for run in runs) for name in runs[0]}
        for broker, runs in rounds.items()
    }
    for broker, median in medians.items():
        print(broker, " ".join(f"{name}={value:.2f}" for name, value in median.items()))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"records": args.records, "rounds": rounds, "median": medians}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
