"""What the simulator predicts each configuration would do: a scenario run offline under each one.

``governor shadow report --simulate SCENARIO`` reads the live and shadow configurations the policy
service applied (their ``PolicyConfigRecord`` records on ``gov.estimates``) and runs the same
scenario and seed through the in-process control plane (services/replay/offline.py) once per
configuration, with that configuration's params and ``applies_to``, so the arms differ only in the
configuration. The rows are the simulator comparison's metrics (services/sim/compare.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import ValidationError

from schemas.names import ESTIMATES_TOPIC
from schemas.records import PolicyConfigRecord
from services.kafka_security import PLAINTEXT
from services.policy.config import PolicySet
from services.replay.offline import OfflineControlPlane
from services.replay.replay import read_topic
from services.settings import KafkaSecurity
from services.sim import Scenario, run_offline
from services.sim.compare import (
    Arm,
    Control,
    PolicyChangeRecorder,
    comparison_rows,
    fleet_gpus,
    planned_gpus,
)

CONFIG_RECORD = b'"record_type":"policy_config"'


def read_config_records(
    bootstrap: str, deployment: str, security: KafkaSecurity = PLAINTEXT
) -> dict[str, PolicyConfigRecord]:
    """The last configuration record of each name (``live`` and the shadows) of ``deployment``.

    Raises:
        BackendUnavailableError: the broker did not answer.
        InvalidInputError: the topic does not exist.
    """
    latest: dict[str, PolicyConfigRecord] = {}
    for raw in read_topic(bootstrap, ESTIMATES_TOPIC, security=security):
        if CONFIG_RECORD not in raw:
            continue
        try:
            record = PolicyConfigRecord.model_validate_json(raw)
        except ValidationError:
            continue
        if record.deployment == deployment:
            latest[record.name] = record
    return latest


def simulate(scenario: Scenario, policy_sets: Mapping[str, PolicySet]) -> list[Arm]:
    """Run ``scenario`` offline under each named policy set; one arm per set, in order."""
    arms = []
    for name, policy_set in policy_sets.items():
        plane = OfflineControlPlane(scenario.deployment, policy_set.registry)
        plane.decider.configure(policy_set)
        recorder = PolicyChangeRecorder(plane)
        summary = run_offline(scenario, sink=recorder, policy_source=plane)
        arms.append(
            Arm(
                name=name,
                control=Control.OFFLINE,
                summary=summary,
                policy_changes=tuple(recorder.changes),
                fleet_gpus=fleet_gpus(scenario),
                planned_gpus=planned_gpus(plane, scenario.duration_s),
            )
        )
    return arms


def prediction_table(arms: list[Arm]) -> str:
    """The console table: one line per metric, a column per configuration, each shadow's change vs live."""
    names = [arm.name for arm in arms]
    rows = comparison_rows(arms)
    header = ["metric", *names, *(f"{name} vs {names[0]}" for name in names[1:])]
    lines = [header]
    for row in rows:
        cells = [f"{row.metric} ({row.unit})", *("-" if v is None else f"{v:.4g}" for v in row.values)]
        live = row.values[0]
        for value in row.values[1:]:
            cells.append("-" if live is None or value is None or live == 0 else f"{(value - live) / abs(live):+.1%}")
        lines.append(cells)
    widths = [max(len(line[c]) for line in lines) for c in range(len(header))]
    return "\n".join(
        "  " + "  ".join(cell.ljust(widths[c]) if c == 0 else cell.rjust(widths[c]) for c, cell in enumerate(line))
        for line in lines
    )
