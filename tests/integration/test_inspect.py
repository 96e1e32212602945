"""``governor status`` and ``governor explain`` against the real broker and Redis, after a real control loop."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from decide.specs import default_registry
from schemas.names import TELEMETRY_TOPIC
from schemas.policy_docs.base import PolicyDocument
from services.cli.main import main
from services.health import ServiceMetrics
from services.policy.service import PolicyService
from services.replay.files import write_events
from services.replay.replay import read_topic
from services.sdk.policy_client import acknowledge
from services.sdk.publisher import TelemetryPublisher
from services.stack.launcher import StackState
from services.store.redis_store import RedisStore
from services.stream.processor import StreamProcessor
from services.testing.streams import synthetic_stream
from services.watched_values import parse_document
from tests.integration.processes import ROOT, wait_until
from tests.integration.publishing import publish_all

pytestmark = pytest.mark.integration


@dataclass(frozen=True, slots=True, kw_only=True)
class Governed:
    """A deployment whose telemetry went through both services, with eng-0 acknowledging its EB+ document."""

    stack: StackState
    deployment: str
    ebplus: PolicyDocument
    history: list[PolicyDocument]
    first_run: dict[str, ServiceMetrics]
    after_ack: dict[str, ServiceMetrics]

    def flags(self) -> list[str]:
        """The flags of ``governor explain``: the deployment and the broker."""
        return ["--deployment", self.deployment, "--kafka-bootstrap", self.stack.kafka_bootstrap]

    def status_flags(self) -> list[str]:
        """The flags of ``governor status``: those of explain and Redis."""
        return [*self.flags(), "--redis-url", self.stack.redis_url]


def _run_services(stack: StackState, deployment: str) -> dict[str, ServiceMetrics]:
    """Run the stream processor, then the policy service, each until idle; return their metrics."""
    metrics = {}
    for name, service_type in (("stream", StreamProcessor), ("policy", PolicyService)):
        store = RedisStore.from_url(stack.redis_url, deployment, 5.0)
        metrics[name] = ServiceMetrics(name, deployment)
        service = service_type(
            deployment=deployment,
            bootstrap=stack.kafka_bootstrap,
            store=store,
            registry=default_registry(),
            metrics=metrics[name],
        )
        service.run(idle_exit_s=4.0)
        service.close()
        store.close()
    return metrics


@pytest.fixture(scope="module")
def governed(stack: StackState) -> Iterator[Governed]:
    deployment = f"test-{uuid.uuid4().hex[:10]}"
    events = synthetic_stream(engines=2, requests=400, deployment=deployment, seed=3)
    publish_all(stack.kafka_bootstrap, events)
    first_run = _run_services(stack, deployment)
    store = RedisStore.from_url(stack.redis_url, deployment, 5.0)
    try:
        raw = store.get_policy("ebplus", "eng-0")
        assert raw is not None
        ebplus = parse_document("ebplus", raw)
        history = [parse_document("ebplus", h) for h in store.policy_history("ebplus", "eng-0")]
        acks = TelemetryPublisher(stack.kafka_bootstrap)
        try:
            acknowledge(acks, ebplus, engine_id="eng-0", seq=100_000, ts=events[-1].ts, event_id="ack-inspect")
            assert acks.flush(10.0)
        finally:
            acks.close()
        after_ack = _run_services(stack, deployment)
        yield Governed(
            stack=stack,
            deployment=deployment,
            ebplus=ebplus,
            history=history,
            first_run=first_run,
            after_ack=after_ack,
        )
        store.flush_deployment()
    finally:
        store.close()


class TestStatus:
    def test_json_report_has_every_engines_documents_its_ack_and_no_lag_left(
        self, governed: Governed, capsys: pytest.CaptureFixture[str]
    ) -> None:
        assert main(["status", "--json", *governed.status_flags()]) == 0
        report = json.loads(capsys.readouterr().out)
        engines = {e["engine"]: e for e in report["engines"]}
        assert sorted(engines) == ["eng-0", "eng-1"]
        assert all(e["events_folded"] > 0 for e in engines.values())
        ebplus = {p["kind"]: p for p in engines["eng-0"]["policies"]}["ebplus"]
        assert ebplus["version"] == governed.ebplus.version
        assert ebplus["acked_version"] == governed.ebplus.version
        assert ebplus["ack_lag"] == 0
        assert ebplus["computed_at"] == governed.ebplus.computed_at
        assert ebplus["age_s"] == pytest.approx(engines["eng-0"]["event_ts"] - governed.ebplus.computed_at)
        assert ebplus["values"]["ebplus_n"] == governed.ebplus.payload.n
        unacked = {p["kind"]: p for p in engines["eng-1"]["policies"]}["ebplus"]
        assert unacked["acked_version"] is None
        assert {c["service"]: c["lag"] for c in report["consumers"]} == {"stream": 0, "policy": 0}

    def test_table_lines_up_one_row_per_document(self, governed: Governed, capsys: pytest.CaptureFixture[str]) -> None:
        assert main(["status", *governed.status_flags()]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[0].startswith(f"deployment {governed.deployment}  newest event t=")
        header = next(line for line in lines if line.startswith("SCOPE"))
        row = next(line for line in lines if line.startswith("eng-0") and " ebplus " in line)
        assert row.split()[:3] == ["eng-0", "ebplus", f"v{governed.ebplus.version}"]
        assert row.index(f"v{governed.ebplus.version}") == header.index("VERSION")

    def test_a_deployment_without_keys_is_one_line_naming_those_that_exist(
        self, governed: Governed, capsys: pytest.CaptureFixture[str]
    ) -> None:
        flags = governed.status_flags()
        flags[1] = "no-such-deployment"
        assert main(["status", *flags]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1
        assert err.startswith("governor: error: deployment 'no-such-deployment' has no keys in redis")
        assert governed.deployment in err

    def test_watch_refreshes_until_ctrl_c_then_exits_cleanly(self, governed: Governed, tmp_path: Path) -> None:
        out, err = tmp_path / "out.txt", tmp_path / "err.txt"
        argv = [sys.executable, "-m", "services.cli", "status", "--watch", "0.2", *governed.status_flags()]
        with out.open("w") as stdout, err.open("w") as stderr:
            process = subprocess.Popen(argv, cwd=ROOT, stdout=stdout, stderr=stderr)
            try:
                wait_until(lambda: out.read_text().count("\ndeployment ") >= 2, 60.0, "two refreshes")
                process.send_signal(signal.SIGINT)
                assert process.wait(timeout=30) == 0
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait()
        assert "Traceback" not in err.read_text()


class TestMetrics:
    def test_the_services_export_each_documents_version_values_and_the_engines_ack(self, governed: Governed) -> None:
        policy = governed.first_run["policy"].registry
        labels = {"deployment": governed.deployment, "service": "policy", "kind": "ebplus", "scope": "eng-0"}
        assert policy.get_sample_value("governor_policy_version", labels) == governed.ebplus.version
        mode = 1.0 if governed.ebplus.payload.mode == "EB" else 0.0
        assert policy.get_sample_value("governor_policy_value", {**labels, "name": "ebplus_exclusive"}) == mode
        valid_for = governed.ebplus.valid_until - governed.ebplus.computed_at
        assert policy.get_sample_value("governor_policy_valid_for_seconds", labels) == pytest.approx(valid_for)
        decided = policy.get_sample_value(
            "governor_decisions_total", {"deployment": governed.deployment, "service": "policy", "kind": "ebplus"}
        )
        store = RedisStore.from_url(governed.stack.redis_url, governed.deployment, 5.0)
        try:
            versions = [
                parse_document("ebplus", store.get_policy("ebplus", e) or "").version for e in ("eng-0", "eng-1")
            ]
        finally:
            store.close()
        assert decided == sum(versions)  # every version of both engines' documents was decided in the first run
        stream = governed.after_ack["stream"].registry
        acked = {**labels, "service": "stream", "engine": "eng-0"}
        assert stream.get_sample_value("governor_policy_acked_version", acked) == governed.ebplus.version
        seen = {"deployment": governed.deployment, "service": "stream", "engine": "eng-0"}
        assert stream.get_sample_value("governor_engine_last_event_timestamp_seconds", seen) > 1.7e9


class TestExplain:
    def test_json_is_the_recorded_decision_of_the_current_document(
        self, governed: Governed, capsys: pytest.CaptureFixture[str]
    ) -> None:
        assert main(["explain", "ebplus", "eng-0", "--json", *governed.flags()]) == 0
        record = json.loads(capsys.readouterr().out)["decision"]
        assert record["accepted"] is True
        assert record["document"] == json.loads(governed.ebplus.model_dump_json())

    def test_an_older_version_with_its_inputs_diagnostics_and_snapshot(
        self, governed: Governed, capsys: pytest.CaptureFixture[str]
    ) -> None:
        first = governed.history[-1]
        assert main(["explain", "ebplus", "eng-0", "--version", str(first.version), "--inputs", *governed.flags()]) == 0
        out = capsys.readouterr().out
        assert out.splitlines()[0] == f"ebplus eng-0 v{first.version} in deployment {governed.deployment}: accepted"
        assert f"  snapshot {first.inputs.snapshot_id}  " in out
        diagnostics = out.split("\ndiagnostics\n")[1].split("\n\n")[0].splitlines()[1:]
        assert sorted(line.split()[0] for line in diagnostics) == sorted(first.diagnostics)
        assert f"estimates read (snapshot v{first.inputs.estimate_versions['eng-0']} of eng-0 " in out

    def test_the_json_with_inputs_is_what_governor_policy_decides_again(
        self, governed: Governed, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        """explain's output, its previous version included, read by ``policy --input`` gives the logged payload."""
        assert main(["explain", "ebplus", "eng-0", "--inputs", "--json", *governed.flags()]) == 0
        printed = capsys.readouterr().out
        body = json.loads(printed)
        assert ("previous" in body) == (governed.ebplus.previous_version is not None)
        path = tmp_path / "explained.json"
        path.write_text(printed)
        assert main(["policy", "ebplus", "--input", str(path), "--json"]) == 0
        out, err = capsys.readouterr()
        assert json.loads(out) == body["decision"]["document"]["payload"]
        assert err == ""

    def test_an_unknown_scope_is_one_line_naming_the_scopes_decided(
        self, governed: Governed, capsys: pytest.CaptureFixture[str]
    ) -> None:
        assert main(["explain", "ebplus", "eng-9", *governed.flags()]) == 2
        err = capsys.readouterr().err
        assert (
            err
            == "governor: error: no ebplus decision for scope 'eng-9' (scopes with ebplus decisions: eng-0, eng-1)\n"
        )


def test_replay_as_deployment_publishes_every_event_under_the_new_name(
    stack: StackState, deployment: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "recorded.jsonl"
    events = synthetic_stream(engines=2, requests=200, deployment="recorded-elsewhere", seed=9)
    write_events(path, events)
    code = main(
        ["replay", str(path), "--max-speed", "--as-deployment", deployment, "--kafka-bootstrap", stack.kafka_bootstrap]
    )
    assert code == 0
    captured = capsys.readouterr()
    assert f"{len(events)} events replayed" in captured.out
    assert " events/s" not in captured.err  # stderr is not a terminal here: no progress bar
    received = [json.loads(raw) for raw in read_topic(stack.kafka_bootstrap, TELEMETRY_TOPIC)]
    ours = [r["event_id"] for r in received if r.get("deployment") == deployment]
    assert sorted(ours) == sorted(e.event_id for e in events)
