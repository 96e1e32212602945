"""ops/: the Grafana dashboard and the Prometheus alert rules query only series the code exports.

The exported names are collected from the metric registries the services and the SDK publisher
build (services/health.py, services/sdk/publisher_metrics.py), never from a hand-written list,
so renaming a metric without its dashboard panel or alert fails here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from services.health import ServiceMetrics
from services.sdk.publisher import TelemetryPublisher
from services.sdk.publisher_metrics import PublisherCollector

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "ops/grafana/dashboards/governor.json"
ALERTS = ROOT / "ops/prometheus/alerts.yml"
METRIC_NAME = re.compile(r"\bgovernor_[a-z0-9_]+")
SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}


def _series_names(registry: CollectorRegistry) -> set[str]:
    """The sample names a registry exposes, labelled children or not (``describe`` needs no samples)."""
    names = set()
    for family in registry.collect():
        names.update(family.name + suffix for suffix in SUFFIXES[family.type])
    return names


@pytest.fixture(scope="module")
def exported() -> set[str]:
    names: set[str] = set()
    for service in ("stream", "policy"):
        names |= _series_names(ServiceMetrics(service, "any").registry)
    publisher = TelemetryPublisher("127.0.0.1:1")
    try:
        registry = CollectorRegistry()
        registry.register(PublisherCollector(publisher, deployment="any", engine="e"))
        names |= _series_names(registry)
    finally:
        publisher.close()
    return names


def _dashboard_queries(node: Any) -> Iterator[str]:
    """Every PromQL string of the dashboard: panel targets and template-variable queries."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "definition") and isinstance(value, str):
                yield value
            elif key == "query" and isinstance(value, str | dict):
                yield value if isinstance(value, str) else str(value.get("query", ""))
            else:
                yield from _dashboard_queries(value)
    elif isinstance(node, list):
        for item in node:
            yield from _dashboard_queries(item)


def _alert_rules() -> list[dict[str, Any]]:
    data = yaml.safe_load(ALERTS.read_text())
    return [rule for group in data["groups"] for rule in group["rules"]]


class TestDashboard:
    def test_every_panel_has_a_query(self) -> None:
        panels = [p for p in json.loads(DASHBOARD.read_text())["panels"] if p["type"] != "row"]
        assert len(panels) >= 15
        assert all(panel["targets"] and panel["targets"][0]["expr"] for panel in panels)

    def test_every_query_names_only_exported_series(self, exported: set[str]) -> None:
        queries = list(_dashboard_queries(json.loads(DASHBOARD.read_text())))
        named = {name for query in queries for name in METRIC_NAME.findall(query)}
        assert named, "the dashboard names no governor series"
        assert sorted(named - exported) == []

    def test_the_per_policy_values_are_on_it(self) -> None:
        text = DASHBOARD.read_text()
        for wanted in ("ebplus_exclusive", "slai_delta_", "fleetopt_n_(short|long)_gpus", "governor_foreign_events"):
            assert wanted in text


class TestAlertRules:
    def test_the_four_operational_alerts_exist(self) -> None:
        names = {rule["alert"] for rule in _alert_rules()}
        assert {
            "GovernorPolicyStale",
            "GovernorConsumerLagGrowing",
            "GovernorDeadLetters",
            "GovernorEngineSilent",
        } <= names

    def test_every_expression_names_only_exported_series(self, exported: set[str]) -> None:
        named = {name for rule in _alert_rules() for name in METRIC_NAME.findall(rule["expr"])}
        assert sorted(named - exported) == []

    def test_prometheus_loads_the_rules_file_it_scrapes_with(self) -> None:
        config = yaml.safe_load((ROOT / "ops/prometheus/prometheus.yml").read_text())
        assert config["rule_files"] == ["/etc/prometheus/alerts.yml"]
        targets = {t for job in config["scrape_configs"] for c in job["static_configs"] for t in c["targets"]}
        assert {"stream:9100", "policy:9100"} <= targets


def test_a_misspelt_name_would_be_caught(exported: set[str]) -> None:
    """The check itself can fail: a name one letter off is not among the exported series."""
    assert "governor_policy_version" in exported
    assert "governor_policy_versions" not in exported
