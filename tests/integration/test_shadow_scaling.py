"""``governor shadow scaling`` reads the decisions topic of a real broker and replays both sides' plans."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from schemas.names import DECISIONS_TOPIC
from schemas.policy_docs.fleetopt import FleetoptPolicy
from schemas.records import DecisionRecord
from services.cli.main import main
from services.kafka_security import kafka_producer
from services.stack.launcher import StackState
from services.testing.plans import fleetopt_plan

pytestmark = pytest.mark.integration

SCALER_TOML = """
mode = "act"
[pools.short]
min_replicas = 1
max_replicas = 8
gpus_per_replica = 2
max_step_replicas = 2
cooldown_s = 30.0
scale_down_hold_s = 120.0
connector = "memory"
[pools.long]
min_replicas = 1
max_replicas = 4
connector = "memory"
"""


def _publish(bootstrap: str, deployment: str, plans: list[tuple[FleetoptPolicy, str | None]]) -> None:
    producer = kafka_producer(bootstrap)
    try:
        for plan, shadow in plans:
            record = DecisionRecord(
                deployment=deployment,
                kind="fleetopt",
                scope="fleet",
                version=plan.version,
                accepted=shadow is None,
                document=plan.model_dump(mode="json"),
                shadow=shadow,
            )
            producer.send(DECISIONS_TOPIC, key=b"fleetopt:fleet", value=record.model_dump_json().encode())
        producer.flush(timeout=30)
    finally:
        producer.close()


def test_the_shadows_plans_and_the_live_ones_are_replayed_side_by_side(
    stack: StackState, deployment: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    live = [fleetopt_plan(short_gpus=4, long_gpus=1, version=v, computed_at=60.0 * v) for v in (1, 2)]
    shadow = [fleetopt_plan(short_gpus=12, long_gpus=1, version=v, computed_at=60.0 * v) for v in (1, 2)]
    _publish(stack.kafka_bootstrap, deployment, [(live[0], None), (shadow[0], "b"), (live[1], None), (shadow[1], "b")])
    config = tmp_path / "scaler.toml"
    config.write_text(SCALER_TOML)
    flags = ["--deployment", deployment, "--kafka-bootstrap", stack.kafka_bootstrap]
    assert main(["shadow", "scaling", "b", "--config", str(config), "--json", *flags]) == 0
    body = json.loads(capsys.readouterr().out)
    assert (body["live"]["plans"], body["shadow"]["plans"]) == (2, 2)
    assert body["live"]["final_replicas"] == {"short": 2, "long": 1}
    assert body["shadow"]["final_replicas"] == {"short": 5, "long": 1}
    assert [(a["from_replicas"], a["to_replicas"]) for a in body["shadow_actions"]] == [(1, 3), (3, 5)]
    assert {a["scaler_id"] for a in body["shadow_actions"]} == {"shadow-b"}

    assert main(["shadow", "scaling", "nobody", "--config", str(config), *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "'nobody'" in err
