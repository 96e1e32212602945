"""Identifiers and Redis keys: no identifier reaches another key's namespace (schemas/names.py, schemas/envelope.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from schemas.engines import EngineRegistered
from schemas.envelope import MAX_ID_CHARS, EngineId, Identifier, Label
from schemas.errors import InvalidInputError
from schemas.names import (
    IDENTIFIER_PATTERN,
    OFFSETS_PATTERN,
    POLICY_CONSUMER,
    STREAM_CONSUMER,
    Partition,
    ack_key,
    ack_of_key,
    ack_pattern,
    deployment_of_offsets_key,
    estimate_key,
    estimate_pattern,
    estimate_scope_of,
    log_ids_key,
    offsets_key,
    pin_key,
    policy_channel,
    policy_history_key,
    policy_key,
    policy_of_key,
    policy_pattern,
    state_key,
)
from services.policy.decisions import FLEET_STATE_PREFIX
from services.policy.handler import FLEET_SCOPE, config_scope, ledger_scope, partition_scope
from services.policy.shadow import SHADOW_STATE_PREFIX

IDENTIFIER: TypeAdapter[str] = TypeAdapter(Identifier)
ENGINE_ID: TypeAdapter[str] = TypeAdapter(EngineId)
LABEL: TypeAdapter[str] = TypeAdapter(Label)


def _valid_engine_id(text: str) -> bool:
    try:
        ENGINE_ID.validate_python(text)
    except ValidationError:
        return False
    return True


identifiers = st.from_regex(IDENTIFIER_PATTERN, fullmatch=True).filter(lambda s: len(s) <= MAX_ID_CHARS)
engine_ids = identifiers.filter(_valid_engine_id)


def engine_keys(deployment: str, engine: str, kinds: list[str]) -> list[str]:
    """Every key the control plane builds from an engine id (its estimates, state, policies, pins, acks)."""
    keys = [state_key(deployment, STREAM_CONSUMER, engine), estimate_key(deployment, engine, "summary")]
    for kind in kinds:
        keys += [
            policy_key(deployment, kind, engine),
            policy_history_key(deployment, kind, engine),
            pin_key(deployment, kind, engine),
            ack_key(deployment, kind, engine),
        ]
    return keys


def service_keys(deployment: str, kinds: list[str], shadow: str) -> list[str]:
    """Every key of the services' own: their committed states, offsets, log ids, the channel, the fleet's policies."""
    scopes = [FLEET_STATE_PREFIX + kind for kind in kinds]
    for partition in (0, 1, 3):
        scopes += [
            config_scope(partition),
            ledger_scope(partition),
            partition_scope(SHADOW_STATE_PREFIX + shadow, partition),
        ]
    keys = [state_key(deployment, POLICY_CONSUMER, scope) for scope in scopes]
    for consumer in (STREAM_CONSUMER, POLICY_CONSUMER):
        keys += [offsets_key(deployment, consumer), log_ids_key(deployment, consumer)]
    keys.append(policy_channel(deployment))
    for kind in kinds:
        keys += [policy_key(deployment, kind, FLEET_SCOPE), policy_history_key(deployment, kind, FLEET_SCOPE)]
    return keys


class TestIdentifier:
    @pytest.mark.parametrize(
        "text",
        ["policy:history", "a:b", "Qwen/Qwen3-8B", "../../etc/passwd", "..", ".", ".hidden", "trailing.", "a..b", ""],
    )
    def test_refuses_key_separators_and_path_like_names(self, text: str) -> None:
        with pytest.raises(ValidationError):
            IDENTIFIER.validate_python(text)

    @pytest.mark.parametrize("text", ["eng-0", "vllm-host.example.com", "policy-config", "user@pool_1", "A.b-c"])
    def test_accepts_names_without_separators(self, text: str) -> None:
        assert IDENTIFIER.validate_python(text) == text

    def test_an_engine_may_not_take_the_fleet_scope(self) -> None:
        with pytest.raises(ValidationError, match="reserved"):
            ENGINE_ID.validate_python(FLEET_SCOPE)

    def test_labels_keep_model_paths(self) -> None:
        """A model name is a value, never a key part, so ``Qwen/Qwen3-8B`` stays valid where it is one."""
        registered = EngineRegistered(
            event_id="vllm-0-0-0",
            ts=0.0,
            deployment="dep",
            engine_id="vllm-0",
            seq=0,
            model="Qwen/Qwen3-8B",
            gpu="nvidia:H100",
            max_num_seqs=256,
            max_num_batched_tokens=8192,
            max_model_len=32768,
            kv_blocks_total=1000,
            block_size_tokens=16,
        )
        assert (registered.model, LABEL.validate_python("cmpl-1:0")) == ("Qwen/Qwen3-8B", "cmpl-1:0")


class TestKeyBuilders:
    @pytest.mark.parametrize(
        ("build", "args"),
        [
            (estimate_key, ("dep", "x:history", "state")),
            (policy_key, ("dep", "admission", "a/b")),
            (policy_key, ("dep:x", "admission", "eng-0")),
            (ack_key, ("dep", "admission", "..")),
            (offsets_key, ("dep", "policy:0")),
        ],
    )
    def test_refuse_a_part_that_is_not_an_identifier(self, build: object, args: tuple[str, ...]) -> None:
        with pytest.raises(InvalidInputError, match="Redis key"):
            build(*args)  # type: ignore[operator]

    def test_service_state_lives_apart_from_an_engine_named_like_it(self) -> None:
        """The probe's engine ``policy-config`` used to share the policy service's state key."""
        engine_state = state_key("dep", STREAM_CONSUMER, "policy-config")
        service_state = state_key("dep", POLICY_CONSUMER, config_scope(0))
        assert (engine_state, service_state) == (
            "gov:dep:est:policy-config:state",
            "gov:dep:service-state:policy:policy-config",
        )

    def test_history_has_its_own_namespace(self) -> None:
        assert policy_history_key("dep", "slai", "eng-0") == "gov:dep:policy-history:slai:eng-0"

    def test_the_scan_pattern_reads_back_only_engine_scopes(self) -> None:
        assert estimate_pattern("dep", "summary") == "gov:dep:est:*:summary"
        assert estimate_scope_of("dep", "summary", estimate_key("dep", "eng-7", "summary")) == "eng-7"
        assert estimate_scope_of("dep", "summary", "gov:dep:est:a:b:summary") is None
        assert estimate_scope_of("dep", "summary", "gov:dep:est::summary") is None

    def test_the_ack_policy_and_offsets_keys_read_back_their_parts_and_nothing_else(self) -> None:
        assert ack_pattern("dep") == "gov:dep:ack:*"
        assert ack_of_key("dep", ack_key("dep", "ebplus", "eng-0")) == ("ebplus", "eng-0")
        assert ack_of_key("dep", "gov:dep:ack:ebplus:eng-0:extra") is None
        assert ack_of_key("dep", policy_key("dep", "ebplus", "eng-0")) is None
        assert policy_pattern("dep") == "gov:dep:policy:*"
        assert policy_of_key("dep", policy_key("dep", "slai", "eng-1")) == ("slai", "eng-1")
        assert policy_of_key("dep", "gov:dep:policy:slai:eng-1:history") is None
        assert OFFSETS_PATTERN == "gov:*:offsets:*"
        assert deployment_of_offsets_key(offsets_key("dep-2", STREAM_CONSUMER)) == "dep-2"
        assert deployment_of_offsets_key("gov:dep:offsets:stream:extra") is None
        assert deployment_of_offsets_key(ack_key("dep", "ebplus", "eng-0")) is None


@given(
    deployment=identifiers,
    engine=engine_ids,
    other=engine_ids,
    kinds=st.lists(identifiers, min_size=1, max_size=3, unique=True),
    shadow=identifiers,
)
def test_no_engine_id_builds_a_service_key_or_another_engines_key(
    deployment: str, engine: str, other: str, kinds: list[str], shadow: str
) -> None:
    """Every key built from an engine id is distinct from every service key and from every other engine's keys."""
    mine = engine_keys(deployment, engine, kinds)
    services = set(service_keys(deployment, kinds, shadow))
    assert len(set(mine)) == len(mine)
    assert services.isdisjoint(mine)
    if other != engine:
        assert set(engine_keys(deployment, other, kinds)).isdisjoint(mine)


class TestPartition:
    def test_the_field_is_topic_colon_partition(self) -> None:
        assert Partition("gov.telemetry", 3).field == "gov.telemetry:3"

    def test_parse_reads_back_the_field(self) -> None:
        assert Partition.parse("gov.telemetry:3") == Partition("gov.telemetry", 3)

    @given(topic=st.text(min_size=1, max_size=40), number=st.integers(min_value=0, max_value=2**31))
    def test_parse_reads_back_any_field_the_topic_ends_at_the_last_colon(self, topic: str, number: int) -> None:
        assert Partition.parse(Partition(topic, number).field) == Partition(topic, number)

    def test_a_partition_equals_the_tuple_kafka_clients_use(self) -> None:
        assert Partition("t", 1) == ("t", 1)
        assert {("t", 1): 5}[Partition("t", 1)] == 5

    @pytest.mark.parametrize("field", ["gov.telemetry", ":3", "gov.telemetry:", "gov.telemetry:-1", "t:x", "t:³"])
    def test_a_field_without_a_topic_or_a_number_is_refused(self, field: str) -> None:
        with pytest.raises(InvalidInputError, match="topic:partition"):
            Partition.parse(field)
