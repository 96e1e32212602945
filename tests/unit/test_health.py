"""services/health.py: what the services export, with deployment and service labels, and the port check."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request

import pytest

from schemas.errors import ConfigError
from schemas.policy_docs import AdmissionPolicy
from schemas.policy_docs.base import InputsDigest
from services.health import FOREIGN_DEPLOYMENTS_LABELLED, HealthServer, ServiceMetrics


def _admission(version: int, computed_at: float) -> AdmissionPolicy:
    return AdmissionPolicy(
        scope="eng-0",
        deployment="prod",
        version=version,
        computed_at=computed_at,
        valid_until=computed_at + 30.0,
        inputs=InputsDigest(snapshot_id="sha256:x"),
        payload={"pressure": 0.5, "level": "busy", "admit_fraction": 0.8},
        state={"smoothed_pressure": 0.5, "level": "busy"},
    )


class TestServiceMetrics:
    def test_a_decided_document_exports_version_validity_and_watched_values(self) -> None:
        metrics = ServiceMetrics("policy", "prod")
        metrics.decided(_admission(3, computed_at=100.0))
        labels = {"deployment": "prod", "service": "policy", "kind": "admission", "scope": "eng-0"}
        value = metrics.registry.get_sample_value
        assert value("governor_policy_version", labels) == 3.0
        assert value("governor_policy_valid_for_seconds", labels) == 30.0
        assert value("governor_policy_value", {**labels, "name": "admission_level"}) == 1.0
        assert value("governor_policy_value", {**labels, "name": "admission_admit_fraction"}) == 0.8

    def test_a_later_snapshot_of_the_scope_ages_its_documents_in_event_time(self) -> None:
        metrics = ServiceMetrics("policy", "prod")
        metrics.decided(_admission(1, computed_at=100.0))
        metrics.snapshot_seen("eng-1", 500.0)
        metrics.snapshot_seen("eng-0", 112.5)
        labels = {"deployment": "prod", "service": "policy", "kind": "admission", "scope": "eng-0"}
        assert metrics.registry.get_sample_value("governor_policy_age_seconds", labels) == 12.5

    def test_foreign_deployments_are_labelled_by_name_up_to_a_bound_then_as_other(self) -> None:
        metrics = ServiceMetrics("stream", "prod")
        names = [f"dep-{i}" for i in range(FOREIGN_DEPLOYMENTS_LABELLED + 2)]
        for name in names:
            metrics.foreign(name)
        metrics.foreign("dep-0")
        value = metrics.registry.get_sample_value
        base = {"deployment": "prod", "service": "stream"}
        assert value("governor_foreign_events_total", {**base, "foreign_deployment": "dep-0"}) == 2.0
        assert value("governor_foreign_events_total", {**base, "foreign_deployment": "other"}) == 2.0


class TestHealthServer:
    def test_a_port_in_use_is_a_config_error_naming_it(self) -> None:
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            port = busy.getsockname()[1]
            with pytest.raises(ConfigError, match=f"metrics port 127.0.0.1:{port} is already in use"):
                HealthServer(ServiceMetrics("stream", "prod"), port)


class TestProgress:
    """Health means progress: records waiting with nothing folded is a stall, an idle log is not."""

    def _server(self, metrics: ServiceMetrics) -> HealthServer:
        server = HealthServer(metrics, 0, stall_after_s=5.0)
        server.start()
        return server

    def test_lag_with_nothing_folded_past_the_stall_time_fails_health_and_readiness(self) -> None:
        metrics = ServiceMetrics("stream", "prod")
        server = self._server(metrics)
        try:
            metrics.lag_measured(1200, assigned=4)
            metrics.last_folded -= 6.0
            healthy, body = server.status(ready=False)
            ready, _ = server.status(ready=True)
            assert (healthy, ready) == (False, False)
            assert body["lag"] == 1200
            assert body["problems"] == ["nothing folded for 6 s while 1200 records wait"]
        finally:
            server.close()

    def test_an_idle_log_without_lag_is_healthy_however_long_since_the_last_fold(self) -> None:
        metrics = ServiceMetrics("stream", "prod")
        server = self._server(metrics)
        try:
            metrics.lag_measured(0, assigned=4)
            metrics.last_folded -= 600.0
            assert server.status(ready=True)[0]
        finally:
            server.close()

    def test_a_fold_clears_the_stall(self) -> None:
        metrics = ServiceMetrics("stream", "prod")
        server = self._server(metrics)
        try:
            metrics.lag_measured(50, assigned=1)
            metrics.last_folded -= 60.0
            metrics.folded()
            assert server.status(ready=False)[0]
        finally:
            server.close()

    def test_batches_failing_past_the_stall_time_fail_health_even_without_lag(self) -> None:
        """The probe's policy service retried one batch for ever (WRONGTYPE taken for an outage) while /healthz said
        200: received records counted as progress, and the retried batch held the backlog, so the lag read 0."""
        metrics = ServiceMetrics("policy", "prod")
        server = self._server(metrics)
        try:
            metrics.lag_measured(0, assigned=1)
            metrics.batch_failed()
            assert server.status(ready=False)[0]
            assert metrics.failing_since is not None
            metrics.failing_since -= 6.0
            metrics.batch_failed()  # a retry keeps the clock of the first failure
            healthy, body = server.status(ready=False)
            ready, _ = server.status(ready=True)
            assert (healthy, ready) == (False, False)
            assert body["problems"] == ["batches failing and retried for 6 s"]
            metrics.folded()
            assert server.status(ready=True)[0]
        finally:
            server.close()

    def test_readiness_needs_assigned_partitions(self) -> None:
        metrics = ServiceMetrics("policy", "prod")
        server = self._server(metrics)
        try:
            metrics.lag_measured(0, assigned=0)
            assert server.status(ready=False)[0]
            assert not server.status(ready=True)[0]
        finally:
            server.close()

    def test_the_endpoints_answer_503_with_the_reason_on_a_stall(self) -> None:
        metrics = ServiceMetrics("stream", "prod")
        server = self._server(metrics)
        try:
            metrics.lag_measured(10, assigned=2)
            metrics.last_folded -= 30.0
            for path in ("/healthz", "/readyz"):
                with pytest.raises(urllib.error.HTTPError) as raised:
                    urllib.request.urlopen(f"http://127.0.0.1:{server.port}{path}", timeout=5.0)
                assert raised.value.code == 503
                body = json.loads(raised.value.read())
                raised.value.close()
                assert body["healthy"] is False
                assert body["lag"] == 10
        finally:
            server.close()

    def test_a_log_reset_is_counted_by_topic_partition_and_reason(self) -> None:
        metrics = ServiceMetrics("stream", "prod")
        metrics.log_reset("gov.telemetry", 2, "topic_id_changed")
        labels = {
            "deployment": "prod",
            "service": "stream",
            "topic": "gov.telemetry",
            "partition": "2",
            "reason": "topic_id_changed",
        }
        assert metrics.registry.get_sample_value("governor_log_resets_total", labels) == 1.0
