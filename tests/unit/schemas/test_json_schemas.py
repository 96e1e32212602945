"""The checked-in JSON Schema files equal what the models generate now."""

from __future__ import annotations

from schemas.json_schemas import JSON_DIR, rendered_json_schemas


def test_checked_in_schemas_are_up_to_date() -> None:
    rendered = rendered_json_schemas()
    on_disk = {path.name: path.read_text() for path in JSON_DIR.glob("*.schema.json")}
    stale = sorted(name for name in rendered.keys() | on_disk.keys() if rendered.get(name) != on_disk.get(name))
    assert stale == [], f"run `governor schema export` to regenerate: {stale}"


def test_event_schema_records_the_otel_name_of_output_tokens() -> None:
    text = rendered_json_schemas()["events.schema.json"]
    assert '"otel": "gen_ai.usage.output_tokens"' in text
