"""The stream processor's runtime setting: kafka by default, faust on request, anything else a clear error."""

from __future__ import annotations

import pytest

from schemas.errors import ConfigError
from services.settings import KafkaSecurity, Settings
from services.store.memory_store import MemoryStore
from services.stream.runtimes import stream_processor


def test_the_runtime_is_kafka_unless_the_environment_or_a_flag_says_faust() -> None:
    assert Settings.load({}, {}).stream_runtime == "kafka"
    assert Settings.load({}, {"GOVERNOR_STREAM_RUNTIME": "faust"}).stream_runtime == "faust"
    assert Settings.load({"stream_runtime": "kafka"}, {"GOVERNOR_STREAM_RUNTIME": "faust"}).stream_runtime == "kafka"


def test_an_unknown_runtime_is_refused_naming_the_variable() -> None:
    with pytest.raises(ConfigError, match="GOVERNOR_STREAM_RUNTIME"):
        Settings.load({}, {"GOVERNOR_STREAM_RUNTIME": "flink"})


def test_the_faust_runtime_refuses_kafka_security_settings_it_cannot_apply() -> None:
    security = KafkaSecurity(protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512", sasl_username="governor")
    with pytest.raises(ConfigError, match="faust runtime does not take Kafka security settings yet"):
        stream_processor(
            "faust",
            deployment="dep",
            bootstrap="127.0.0.1:1",
            store=MemoryStore(),
            registry=[],
            security=security,
        )


def test_the_faust_runtime_is_found_installed_in_a_process_that_has_imported_faust() -> None:
    """faust swaps its module for one without ``__spec__``, on which ``importlib.util.find_spec`` raises."""
    pytest.importorskip("faust")
    security = KafkaSecurity(protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512", sasl_username="governor")
    with pytest.raises(ConfigError, match="does not take Kafka security settings"):
        stream_processor(
            "faust", deployment="dep", bootstrap="127.0.0.1:1", store=MemoryStore(), registry=[], security=security
        )
