"""The KEDA external scaler (services/scaler/external_scaler.py), answered to a client generated from KEDA's proto."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_tools import protoc

from schemas.scaling import ScalerConfig
from services.health import ServiceMetrics
from services.scaler import (
    DesiredReplicas,
    ExternalScalerServer,
    KedaConnector,
    ListActionSink,
    MemoryConnector,
    ScalerMetrics,
    ScalerService,
)
from services.scaler.proto import externalscaler_pb2 as pb
from services.scaler.proto import externalscaler_pb2_grpc as pb_grpc
from services.sdk.protocol import StaticPolicySource
from services.testing.plans import fleetopt_plan

ROOT = Path(__file__).resolve().parents[3]
PROTO = Path("services/scaler/proto/externalscaler.proto")
DEADLINE_S = 10.0


@pytest.fixture
def board() -> DesiredReplicas:
    """Both pools decided: short at 2, long at 1."""
    board = DesiredReplicas(["short", "long"])
    board.set("short", 2)
    board.set("long", 1)
    return board


@pytest.fixture
def stub(board: DesiredReplicas) -> Iterator[pb_grpc.ExternalScalerStub]:
    server = ExternalScalerServer(board, 0)
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    try:
        yield pb_grpc.ExternalScalerStub(channel)
    finally:
        channel.close()
        server.close()


def ref(pool: str) -> pb.ScaledObjectRef:
    return pb.ScaledObjectRef(name=f"vllm-{pool}", namespace="llm", scalerMetadata={"pool": pool})


def metric_value(stub: pb_grpc.ExternalScalerStub, pool: str) -> int:
    request = pb.GetMetricsRequest(scaledObjectRef=ref(pool), metricName=f"governor-{pool}-replicas")
    (value,) = stub.GetMetrics(request, timeout=DEADLINE_S).metricValues
    assert value.metricValueFloat == float(value.metricValue)
    return int(value.metricValue)


class TestExternalScalerServer:
    def test_metric_spec_has_target_size_one_so_the_hpa_asks_for_the_value(
        self, stub: pb_grpc.ExternalScalerStub
    ) -> None:
        (spec,) = stub.GetMetricSpec(ref("short"), timeout=DEADLINE_S).metricSpecs
        assert (spec.metricName, spec.targetSize, spec.targetSizeFloat) == ("governor-short-replicas", 1, 1.0)

    def test_each_pool_gets_its_own_count(self, stub: pb_grpc.ExternalScalerStub) -> None:
        assert (metric_value(stub, "short"), metric_value(stub, "long")) == (2, 1)

    def test_the_answer_follows_a_new_plan(self, board: DesiredReplicas, stub: pb_grpc.ExternalScalerStub) -> None:
        """The scaler's decisions on two successive plans reach KEDA's GetMetrics."""
        now_s = 1000.0
        plans = StaticPolicySource()
        config = ScalerConfig.model_validate(
            {
                "mode": "act",
                "pools": {
                    name: {"max_replicas": 8, "max_step_replicas": 8, "cooldown_s": 0.0, "connector": "keda"}
                    for name in ("short", "long")
                },
            }
        )
        service = ScalerService(
            config=config,
            deployment="test",
            scaler_id="scaler-0",
            plans=plans,
            connectors={name: KedaConnector(name, board) for name in ("short", "long")},
            sink=ListActionSink(),
            metrics=ScalerMetrics(ServiceMetrics("scaler", "test")),
            clock=lambda: now_s,
        )
        plans.put(fleetopt_plan(short_gpus=5, long_gpus=3, version=1, computed_at=now_s))
        service.step()
        assert (metric_value(stub, "short"), metric_value(stub, "long")) == (5, 3)
        plans.put(fleetopt_plan(short_gpus=7, long_gpus=4, version=2, computed_at=now_s))
        actions = service.step()
        assert (metric_value(stub, "short"), metric_value(stub, "long")) == (7, 4)
        assert {(a.connector, a.target, a.plan_version) for a in actions} == {
            ("keda", "keda/long", 2),
            ("keda", "keda/short", 2),
        }

    def test_is_active_while_the_count_is_above_zero(
        self, board: DesiredReplicas, stub: pb_grpc.ExternalScalerStub
    ) -> None:
        assert stub.IsActive(ref("long"), timeout=DEADLINE_S).result is True
        board.set("long", 0)
        assert stub.IsActive(ref("long"), timeout=DEADLINE_S).result is False

    def test_stream_is_active_pushes_each_change(
        self, board: DesiredReplicas, stub: pb_grpc.ExternalScalerStub
    ) -> None:
        stream = stub.StreamIsActive(ref("short"), timeout=DEADLINE_S)
        assert next(stream).result is True
        board.set("short", 0)
        assert next(stream).result is False
        board.set("short", 3)
        assert next(stream).result is True
        stream.cancel()

    def test_an_unknown_pool_is_not_found_and_the_known_ones_are_named(self, stub: pb_grpc.ExternalScalerStub) -> None:
        with pytest.raises(grpc.RpcError) as info:
            stub.GetMetricSpec(ref("medium"), timeout=DEADLINE_S)
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
        assert "pool='medium' is not a pool of this scaler (known: long, short)" in info.value.details()


class TestBeforeTheFirstDecision:
    @pytest.fixture
    def undecided(self) -> Iterator[tuple[DesiredReplicas, pb_grpc.ExternalScalerStub]]:
        board = DesiredReplicas(["short"])
        server = ExternalScalerServer(board, 0)
        server.start()
        channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
        try:
            yield board, pb_grpc.ExternalScalerStub(channel)
        finally:
            channel.close()
            server.close()

    def test_keda_is_answered_unavailable_not_a_guessed_count(
        self, undecided: tuple[DesiredReplicas, pb_grpc.ExternalScalerStub]
    ) -> None:
        _, stub = undecided
        for call in (lambda: metric_value(stub, "short"), lambda: stub.IsActive(ref("short"), timeout=DEADLINE_S)):
            with pytest.raises(grpc.RpcError) as info:
                call()
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "pool 'short' has no decision yet" in info.value.details()

    def test_the_stream_stays_silent_until_the_first_decision(
        self, undecided: tuple[DesiredReplicas, pb_grpc.ExternalScalerStub]
    ) -> None:
        board, stub = undecided
        stream = stub.StreamIsActive(ref("short"), timeout=DEADLINE_S)
        board.set("short", 3)
        assert next(stream).result is True
        stream.cancel()


class TestKedaConnector:
    def test_reads_the_live_count_through_its_reader_and_posts_to_the_board(self) -> None:
        board = DesiredReplicas(["short"])
        connector = KedaConnector("short", board, reader=MemoryConnector("short", 10))
        assert connector.replicas() == 10
        connector.scale(12)
        assert (board.get("short"), connector.replicas()) == (12, 10)

    def test_without_a_reader_the_count_is_the_last_posted(self) -> None:
        board = DesiredReplicas(["short"])
        connector = KedaConnector("short", board)
        assert connector.replicas() is None
        connector.scale(3)
        assert connector.replicas() == 3


class TestGeneratedStubs:
    def test_committed_stubs_match_a_fresh_generation_from_the_vendored_proto(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.chdir(ROOT)
        status = protoc.main(
            [
                "grpc_tools.protoc",
                "-I.",
                f"--python_out={tmp_path}",
                f"--pyi_out={tmp_path}",
                f"--grpc_python_out={tmp_path}",
                str(PROTO),
            ]
        )
        assert status == 0
        for name in ("externalscaler_pb2.py", "externalscaler_pb2.pyi", "externalscaler_pb2_grpc.py"):
            fresh = (tmp_path / PROTO.parent / name).read_text()
            assert fresh == (ROOT / PROTO.parent / name).read_text(), name

    def test_the_vendored_proto_names_its_source_tag_and_licence(self) -> None:
        header = (ROOT / PROTO).read_text().splitlines()[:3]
        assert "tag v2.20.2, pkg/scalers/externalscaler/externalscaler.proto" in header[1]
        assert "Apache License, Version 2.0" in header[2]
