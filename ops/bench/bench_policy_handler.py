"""What the policy service's record handling costs, and what its snapshot ledger adds per commit.

Usage: ``python ops/bench/bench_policy_handler.py [--seconds 600] [--repeat 3]
[--out out/bench/policy_handler.json]``.

Simulates the ``fleet-8`` scenario for ``--seconds`` of event time and folds and decides it offline
(services/replay/offline.py), then feeds its engine snapshots, as the JSON
records the service reads from ``gov.estimates``, through ``PolicyHandler`` on an in-memory store:
read, ledger check, stage, apply. It prints the CPU (thread) time per snapshot, and the time of the
``states()`` serialisation a commit writes, for ledgers of 10 to 10,000 engines (the ledger is the
part of it that grows with the fleet). No Kafka or Redis: their round trips are not in the figures;
log lines below warning are not rendered (the service writes them as JSON, off this path).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import structlog

from decide.specs import default_registry
from ops.bench.backlog import ConsumedRecordView
from schemas.names import ESTIMATES_TOPIC
from schemas.policy_docs.base import SourceOffset
from schemas.records import EstimateSnapshot
from services.policy.handler import PendingBatch, PolicyHandler
from services.replay.offline import OfflineControlPlane
from services.sdk.protocol import ListSink, StaticPolicySource
from services.sim import load_scenario, run_offline
from services.store.memory_store import MemoryStore

LEDGER_SIZES = (10, 100, 1000, 10_000)
DEPLOYMENT = "bench"
SCENARIO = "fleet-8"


@dataclass
class _Sink:
    sent: int = 0
    by_topic: dict[str, int] = field(default_factory=dict)

    def send(self, topic: str, key: bytes | None, value: bytes) -> None:
        self.sent += 1
        self.by_topic[topic] = self.by_topic.get(topic, 0) + 1


def _snapshot_values(seconds: float) -> list[bytes]:
    sink = ListSink()
    scenario = replace(load_scenario(SCENARIO, duration_s=seconds, seed=1), deployment=DEPLOYMENT)
    run_offline(scenario, sink=sink, policy_source=StaticPolicySource())
    plane = OfflineControlPlane(DEPLOYMENT, default_registry())
    for event in sink.events:
        plane.publish(event)
    return [s.model_dump_json().encode() for s in plane.snapshots if s.scope != "fleet"]


def _handle_all(values: list[bytes]) -> tuple[float, PolicyHandler, _Sink]:
    sink = _Sink()
    handler = PolicyHandler(deployment=DEPLOYMENT, store=MemoryStore(), registry=default_registry(), sink=sink)
    started = time.thread_time()
    for offset, value in enumerate(values):
        batch = PendingBatch()
        handler.handle(ConsumedRecordView(ESTIMATES_TOPIC, 0, offset, None, value), batch)
        handler.apply(batch)
    return time.thread_time() - started, handler, sink


def _states_ms(values: list[bytes], engines: int, repeat: int) -> float:
    """Milliseconds of one ``states()`` with a ledger of ``engines`` scopes (thread time, best of ``repeat``)."""
    _, handler, _ = _handle_all(values[:1])
    for n in range(engines):
        snapshot_body = json.loads(values[0])
        snapshot_body["scope"] = f"eng-{n}"
        snapshot_body["offsets"] = [SourceOffset(topic="t", partition=0, offset=n).model_dump()]
        handler.ledger(0).check(EstimateSnapshot.model_validate(snapshot_body))
    best = float("inf")
    for _ in range(repeat):
        started = time.thread_time()
        handler.states()
        best = min(best, time.thread_time() - started)
    return best * 1000


def main() -> None:
    """Time the handling of a snapshot stream and the commit's serialisation; write the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("out/bench/policy_handler.json"))
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    values = _snapshot_values(args.seconds)
    runs = [_handle_all(values) for _ in range(args.repeat)]
    best_s = min(seconds for seconds, _, _ in runs)
    _, handler, sink = runs[0]
    figures: dict[str, object] = {
        "snapshots": len(values),
        "decisions": handler.counters.decisions,
        "records_sent": sink.sent,
        "handle_us_per_snapshot_cpu": best_s / len(values) * 1e6,
        "states_ms_by_ledger_engines": {str(n): _states_ms(values, n, args.repeat) for n in LEDGER_SIZES},
    }
    for name, value in figures.items():
        print(f"{name:>30}: {value}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
