"""Appending policy configurations to ``gov.estimates``, where the policy service applies them in order.

``governor run policy --config/--shadow``, ``governor config apply``, ``governor shadow stop`` and
``governor demo --config`` all go through ``publish_configs``: a configuration reaches the service
as a record of the log it decides from, never as a file it reads, so a replay of the log decides
as live did (services/policy/service.py).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from kafka.errors import KafkaError
from pydantic import JsonValue

from schemas.errors import BackendUnavailableError, InvalidInputError
from schemas.names import ESTIMATES_TOPIC
from schemas.records import PolicyConfigRecord
from services.kafka_clients import close_producer, record_producer
from services.kafka_security import PLAINTEXT
from services.policy.config import config_digest, read_config
from services.settings import KafkaSecurity

CONFIG_KEY_PREFIX = "config:"
LIVE = "live"
SHADOW_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def config_record(deployment: str, name: str, data: dict[str, Any] | None, source: str) -> PolicyConfigRecord:
    """The record of configuration ``data`` (None: back to defaults, or stop the shadow) under ``name``."""
    config: dict[str, JsonValue] | None = data
    return PolicyConfigRecord(
        deployment=deployment,
        name=name,
        config=config,
        digest=None if data is None else config_digest(data),
        source=source,
    )


def config_key(record: PolicyConfigRecord) -> bytes:
    """The key of ``record`` on ``gov.estimates``: ``config:{deployment}:{name}``.

    One key per deployment and name, because ``gov.estimates`` is compacted
    (services/stack/topic_configs.py): the last record of each key outlives the retention, so every
    deployment's live configuration and every shadow's stay, where one key for all would keep only
    whichever was published last. No scope has a ``:`` (schemas/names.py), so no snapshot shares it.
    """
    return f"{CONFIG_KEY_PREFIX}{record.deployment}:{record.name}".encode()


def file_record(deployment: str, name: str, path: Path) -> PolicyConfigRecord:
    """Read and validate the TOML file at ``path`` into a record named ``name``.

    Raises:
        InvalidInputError: the file does not validate (one line naming it, the key and what was expected).
    """
    _, data = read_config(path)
    return config_record(deployment, name, data, str(path))


def shadow_assignment(text: str) -> tuple[str, Path]:
    """Split ``--shadow NAME=CONFIG``.

    Raises:
        InvalidInputError: no ``=``, or a name that is not 1-64 letters, digits, ``_.-``, or is ``live``.
    """
    name, sep, path = text.partition("=")
    if not sep or not path or not SHADOW_NAME.match(name) or name == LIVE:
        msg = f"--shadow {text!r}: expected NAME=CONFIG, NAME of 1-64 letters, digits or _.- and not {LIVE!r}"
        raise InvalidInputError(msg, field="shadow", value=text)
    return name, Path(path)


def publish_configs(
    bootstrap: str, records: list[PolicyConfigRecord], timeout_s: float, security: KafkaSecurity = PLAINTEXT
) -> None:
    """Append ``records`` to every partition of ``gov.estimates`` and wait until the broker has them.

    Every policy-service member owns some partitions and applies a configuration where its log has
    it, so each partition carries a copy (with one partition, one copy, as always).

    Raises:
        BackendUnavailableError: the broker did not take them within ``timeout_s``.
    """
    try:
        producer = record_producer(bootstrap, security=security)
    except KafkaError as exc:
        msg = f"kafka at {bootstrap} did not answer: {exc}"
        raise BackendUnavailableError(msg, backend="kafka") from exc
    try:
        partitions = sorted(producer.partitions_for(ESTIMATES_TOPIC))
        futures = [
            producer.send(ESTIMATES_TOPIC, key=config_key(record), value=record.model_dump_json().encode(), partition=p)
            for record in records
            for p in partitions
        ]
        producer.flush(timeout=timeout_s)
        for future in futures:
            if not future.succeeded():
                msg = f"kafka at {bootstrap} did not take the policy config record within {timeout_s:g} s"
                raise BackendUnavailableError(msg, backend="kafka")
    finally:
        close_producer(producer, timeout_s=5.0)
