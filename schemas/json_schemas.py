"""Generation of the checked-in JSON Schema files (``schemas/json/``), tested to be up to date."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from schemas.events import event_json_schema
from schemas.policy_docs import POLICY_DOCUMENTS
from schemas.records import DeadLetter, DecisionRecord, EstimateSnapshot, PolicyConfigRecord, StateCheckpoint
from schemas.scaling import ScalerConfig, ScalingAction

JSON_DIR = Path(__file__).resolve().parent / "json"


def _model_schema(model: type[BaseModel]) -> str:
    return json.dumps(model.model_json_schema(), indent=2, sort_keys=True) + "\n"


def rendered_json_schemas() -> dict[str, str]:
    """Return file name -> JSON Schema text for every contract Governor publishes."""
    files = {"events.schema.json": event_json_schema()}
    models: tuple[type[BaseModel], ...] = (
        DeadLetter,
        DecisionRecord,
        EstimateSnapshot,
        PolicyConfigRecord,
        ScalerConfig,
        StateCheckpoint,
        ScalingAction,
        *POLICY_DOCUMENTS,
    )
    for model in models:
        files[f"{model.__name__}.schema.json"] = _model_schema(model)
    return files


def write_json_schemas(directory: Path = JSON_DIR) -> list[Path]:
    """Write every schema file into ``directory`` and return their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in sorted(rendered_json_schemas().items()):
        path = directory / name
        path.write_text(text)
        written.append(path)
    return written
