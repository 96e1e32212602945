"""Soak: the stream processor and the policy service at a steady publish rate, watched every second.

Both services run as ``governor run stream|policy`` processes on a private local stack. A producer
publishes simulator telemetry (fleet-8, its event times shifted forward on each pass so time never
goes back) at ``--rate`` events/s for ``--seconds``; every second the soak reads each service's
``/healthz`` and ``/metrics`` (events folded, consumer lag) and the resident memory of the broker
and the stream processor. It then waits up to ``--catch-up-s`` after the last record is published
(on a loaded machine the publisher itself may take longer than ``--seconds``) for the processor to
catch up.

A *stall* is a stretch of at least ``--stall-s`` seconds (30 s, as ``/healthz`` counts one) in
which records were waiting (published minus folded above zero) and the folded count did not move;
for each one the soak reports what ``/healthz`` answered meanwhile. The CPU seconds of the
processor and the broker are sampled too: on a shared machine they tell slow folding from a stall.
Figures only, never asserted (tests/integration/test_progress.py holds the short, asserted version):

    PYTHONPATH=. python ops/bench/bench_soak.py [--seconds 180] [--rate 3000] [--linger-ms 5]
        [--broker tansu|kafka] [--out out/bench/soak.json]

``run_soak`` is also the reliability benchmark's soak (ops/bench/bench_reliability.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

from schemas.events import Event, encode_event
from schemas.names import TELEMETRY_TOPIC
from services.kafka_security import PLAINTEXT, kafka_producer
from services.sdk.protocol import ListSink, StaticPolicySource
from services.settings import Settings
from services.sim import load_scenario, run_offline
from services.stack.launcher import BrokerKind, StackState, stack_down, stack_up
from services.stack.processes import free_port

SIM_SECONDS = 120.0  # one pass of simulated telemetry; later passes shift its event times


def _events(deployment: str) -> list[Event]:
    scenario = replace(load_scenario("fleet-8", duration_s=SIM_SECONDS), deployment=deployment)
    sink = ListSink()
    run_offline(scenario, sink=sink, policy_source=StaticPolicySource())
    return sink.events


def _start(name: str, state: StackState, deployment: str, port: int, log_dir: Path) -> subprocess.Popen[bytes]:
    argv = [
        sys.executable,
        "-m",
        "services.cli",
        "run",
        name,
        "--deployment",
        deployment,
        "--kafka-bootstrap",
        state.kafka_bootstrap,
        "--redis-url",
        state.redis_url,
        "--metrics-port",
        str(port),
        "--log-level",
        "info",
    ]
    log_file = (log_dir / f"{name}.log").open("ab")
    return subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT)


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2.0) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()
    except OSError:
        return 0, ""


def _metric(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def _cpu_s(pid: int | None) -> float | None:
    """CPU seconds (user + system) the process has used: on a shared machine, what it cost, whatever the wall time."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mib(pid: int | None) -> float | None:
    if pid is None:
        return None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


class _Publisher(threading.Thread):
    """Publish ``events`` in passes at ``rate`` events/s for ``seconds``; ``sent`` counts acknowledged sends."""

    def __init__(self, bootstrap: str, events: list[Event], rate: float, seconds: float, linger_ms: int) -> None:
        super().__init__(daemon=True)
        self._producer = kafka_producer(bootstrap, PLAINTEXT, linger_ms=linger_ms, acks=1)
        self._events = events
        self._rate = rate
        self._seconds = seconds
        self.sent = 0

    def run(self) -> None:
        span = self._events[-1].ts - self._events[0].ts + 1.0
        started = time.perf_counter()
        total = int(self._rate * self._seconds)
        for i in range(total):
            due = started + i / self._rate
            wait = due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            passes, index = divmod(i, len(self._events))
            event = self._events[index]
            if passes:
                event = event.model_copy(update={"ts": event.ts + passes * span})
            self._producer.send(TELEMETRY_TOPIC, key=event.engine_id.encode(), value=encode_event(event))
            self.sent += 1
        self._producer.flush(60.0)
        self._producer.close(timeout=10)


def _stalls(samples: list[dict[str, object]], stall_s: float) -> list[dict[str, object]]:
    """Stretches of ``stall_s`` or more where records waited and the folded count stood still."""
    stalls: list[dict[str, object]] = []
    start: dict[str, object] | None = None
    statuses: set[int] = set()
    for sample in samples:
        waiting = int(sample["published"]) > int(sample["folded"])  # type: ignore[call-overload]
        if start is not None and sample["folded"] == start["folded"] and waiting:
            statuses.add(int(sample["stream_healthz"]))  # type: ignore[call-overload]
            continue
        if start is not None and float(sample["t_s"]) - float(start["t_s"]) >= stall_s:  # type: ignore[arg-type]
            stalls.append({"from_s": start["t_s"], "to_s": sample["t_s"], "healthz": sorted(statuses)})
        start, statuses = (sample, {int(sample["stream_healthz"])}) if waiting else (None, set())  # type: ignore[call-overload]
    if start is not None and float(samples[-1]["t_s"]) - float(start["t_s"]) >= stall_s:  # type: ignore[arg-type]
        stalls.append({"from_s": start["t_s"], "to_s": samples[-1]["t_s"], "healthz": sorted(statuses)})
    return stalls


@dataclass(frozen=True, slots=True, kw_only=True)
class SoakPlan:
    """One soak: the broker, the publish rate and duration, and what counts as a stall."""

    broker: BrokerKind
    seconds: float
    rate_per_s: float
    linger_ms: int = 5  # the engine SDK publisher's default
    catch_up_s: float = 60.0
    stall_s: float = 30.0  # what /healthz calls a stall (GOVERNOR_STALL_AFTER_S's default)


def _per_minute(samples: list[dict[str, object]]) -> list[dict[str, object]]:
    """Events published and folded in each minute of the soak, and the lag at its end: folding over time."""
    minutes: list[dict[str, object]] = []
    previous = {"published": 0, "folded": 0}
    for sample in samples:
        t_s = float(sample["t_s"])  # type: ignore[arg-type]
        if t_s >= 60.0 * (len(minutes) + 1) or sample is samples[-1]:
            minutes.append(
                {
                    "to_s": sample["t_s"],
                    "published": int(sample["published"]) - previous["published"],  # type: ignore[call-overload]
                    "folded": int(sample["folded"]) - previous["folded"],  # type: ignore[call-overload]
                    "lag_end": sample["lag"],
                    "stream_healthz_end": sample["stream_healthz"],
                }
            )
            previous = {"published": int(sample["published"]), "folded": int(sample["folded"])}  # type: ignore[call-overload]
    return minutes


def run_soak(plan: SoakPlan) -> dict[str, object]:
    """Run ``plan`` on a private stack of ``plan.broker`` (the Redis at REDIS_URL, or its own); return the figures."""
    settings = Settings.load({})
    state_dir = Path(tempfile.mkdtemp(prefix="governor-soak-"))
    state = stack_up(state_dir, settings.redis_url, free_port(), broker=plan.broker)
    deployment = f"soak-{uuid.uuid4().hex[:6]}"
    ports = {"stream": free_port(), "policy": free_port()}
    services = {name: _start(name, state, deployment, port, state_dir) for name, port in ports.items()}
    samples: list[dict[str, object]] = []
    try:
        events = _events(deployment)
        print(
            f"soak on {plan.broker}: {len(events)} events per pass; publishing {plan.rate_per_s:,.0f} events/s "
            f"for {plan.seconds:.0f} s",
            flush=True,
        )
        time.sleep(8.0)  # both members join their groups
        publisher = _Publisher(state.kafka_bootstrap, events, plan.rate_per_s, plan.seconds, plan.linger_ms)
        started = time.monotonic()
        published_at: float | None = None  # seconds into the soak when the last record was sent
        publisher.start()
        while True:
            elapsed = time.monotonic() - started
            stream_status, stream_body = _get(ports["stream"], "/healthz")
            policy_status, _ = _get(ports["policy"], "/healthz")
            _, metrics = _get(ports["stream"], "/metrics")
            folded = _metric(metrics, "governor_events_folded_total") or 0.0
            sample = {
                "t_s": round(elapsed, 1),
                "published": publisher.sent,
                "folded": int(folded),
                "lag": _metric(metrics, "governor_consumer_lag"),
                "stream_healthz": stream_status,
                "policy_healthz": policy_status,
                "stream_health": json.loads(stream_body) if stream_body.startswith("{") else None,
                "broker_rss_mib": _rss_mib(state.broker_pid),
                "stream_rss_mib": _rss_mib(services["stream"].pid),
                "stream_cpu_s": _cpu_s(services["stream"].pid),
                "broker_cpu_s": _cpu_s(state.broker_pid),
            }
            samples.append(sample)
            if int(elapsed) % 15 == 0:
                print(
                    f"{elapsed:6.0f} s  published {publisher.sent:>8}  folded {int(folded):>8}  lag {sample['lag']}  "
                    f"healthz {stream_status}/{policy_status}  broker {sample['broker_rss_mib']} MiB",
                    flush=True,
                )
            if published_at is None and not publisher.is_alive():
                published_at = elapsed
            if published_at is not None and (folded >= publisher.sent or elapsed > published_at + plan.catch_up_s):
                break
            time.sleep(max(0.0, 1.0 - (time.monotonic() - started - elapsed)))
    finally:
        for service in services.values():
            service.terminate()
            service.wait(timeout=30)
        stack_down(state_dir)
    stalls = _stalls(samples, plan.stall_s)
    last = samples[-1]
    report = {
        "broker": plan.broker,
        "rate_events_per_s": plan.rate_per_s,
        "linger_ms": plan.linger_ms,
        "seconds": plan.seconds,
        "published": last["published"],
        "folded": last["folded"],
        "published_after_s": published_at,
        "ended_after_s": last["t_s"],
        "stalls": stalls,
        "per_minute": _per_minute(samples),
        "lag_max": max(float(s["lag"] or 0.0) for s in samples),  # type: ignore[arg-type]
        "stream_healthz_503_samples": sum(1 for s in samples if s["stream_healthz"] == 503),
        "stream_cpu_s": last["stream_cpu_s"],
        "broker_cpu_s": last["broker_cpu_s"],
        "broker_rss_mib_max": max(float(s["broker_rss_mib"] or 0.0) for s in samples),  # type: ignore[arg-type]
        "stream_rss_mib_max": max(float(s["stream_rss_mib"] or 0.0) for s in samples),  # type: ignore[arg-type]
        "load_average": os.getloadavg(),
        "logs": str(state_dir),
        "samples": samples,
    }
    print(
        f"{plan.broker}: published {last['published']}, folded {last['folded']} after {last['t_s']} s; "
        f"stalls: {stalls or 'none'}; lag max {report['lag_max']:.0f}; "
        f"broker RSS max {report['broker_rss_mib_max']:.0f} MiB; CPU s: processor {report['stream_cpu_s']}, "
        f"broker {report['broker_cpu_s']}; load average {report['load_average']}"
    )
    for minute in report["per_minute"]:  # type: ignore[attr-defined]
        print(
            f"  to {minute['to_s']:>6} s: published {minute['published']:>7}, folded {minute['folded']:>7}, "
            f"lag {minute['lag_end']}, /healthz {minute['stream_healthz_end']}"
        )
    return report


def main() -> int:
    """Run the soak on a private stack; print and write the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=180.0, help="how long to publish")
    parser.add_argument("--rate", type=float, default=3000.0, help="publish rate, events/s")
    parser.add_argument("--catch-up-s", type=float, default=60.0, help="longest wait for the processor afterwards")
    parser.add_argument(
        "--linger-ms", type=int, default=5, help="the producer's linger (the engine SDK publisher's default: 5 ms)"
    )
    parser.add_argument(
        "--stall-s", type=float, default=30.0, help="a stall is at least this long (/healthz's default: 30 s)"
    )
    parser.add_argument(
        "--broker",
        choices=("tansu", "kafka"),
        default=Settings.load({}).broker,
        help="the local broker (GOVERNOR_BROKER)",
    )
    parser.add_argument("--out", type=Path, default=Path("out/bench/soak.json"))
    args = parser.parse_args()
    plan = SoakPlan(
        broker=args.broker,
        seconds=args.seconds,
        rate_per_s=args.rate,
        linger_ms=args.linger_ms,
        catch_up_s=args.catch_up_s,
        stall_s=args.stall_s,
    )
    report = run_soak(plan)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
