"""The KEDA connector: a gRPC server implementing KEDA's ``externalscaler.proto`` (services/scaler/proto).

A pool driven by KEDA is not resized by the scaler itself: the scaler decides its count under the
same safety rules and posts it on a ``DesiredReplicas`` board; KEDA asks this server for it and its
HPA sets the Deployment's replicas. A ``ScaledObject`` with an ``external`` trigger names the pool
in its metadata (``pool: short``, ops/k8s/base/vllm-pool-keda.yaml). The answers:

- ``GetMetricSpec``: one metric, ``governor-<pool>-replicas``, with target size 1;
- ``GetMetrics``: the pool's count as that metric's value. KEDA's HPA uses ``AverageValue``
  targets for external metrics, ``replicas = ceil(value / target size)``, so the HPA asks for
  exactly the count (within the ScaledObject's own min and max);
- ``IsActive``: whether the count is above zero (KEDA scales to zero only where the
  ScaledObject's ``minReplicaCount`` is 0);
- ``StreamIsActive``: the same, pushed again on every change of the pool's count (KEDA's push
  scaler), so a new plan reaches KEDA without waiting for its polling interval.

A pool the scaler does not know is answered ``NOT_FOUND`` with the known pools named. A pool without a
decision yet (no valid plan since the scaler started, or a scaler in advisory mode, which posts nothing) is
answered ``UNAVAILABLE`` and its stream stays silent: KEDA then leaves the HPA where it is (or applies the
ScaledObject's ``fallback``), rather than acting on a count the scaler never decided.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures
from typing import Any, NoReturn

import grpc

from schemas.errors import ConfigError
from schemas.scaling import ConnectorKind
from services.scaler.connector import ScaleConnector
from services.scaler.proto import externalscaler_pb2 as pb

SERVICE_NAME = "externalscaler.ExternalScaler"
POOL_METADATA_KEY = "pool"
STREAM_RECHECK_S = 5.0  # a StreamIsActive call notices a client gone away at least this often


def metric_name(pool: str) -> str:
    """The metric KEDA is told to read for ``pool``."""
    return f"governor-{pool}-replicas"


class DesiredReplicas:
    """Each KEDA pool's count, shared between the scaler's loop and the gRPC threads; wakes streams on change.

    A pool has no count until the scaler's first decision for it: until then KEDA is answered
    ``UNAVAILABLE`` and its HPA keeps the pool where it is, rather than being told a guess.
    """

    def __init__(self, pools: list[str]) -> None:
        """Answer for ``pools``, none of them decided yet."""
        self._known = frozenset(pools)
        self._counts: dict[str, int] = {}
        self._changes = 0
        self._changed = threading.Condition()

    def pools(self) -> list[str]:
        """The pools it answers for."""
        return sorted(self._known)

    def knows(self, pool: str) -> bool:
        """Whether ``pool`` is one of its pools."""
        return pool in self._known

    def get(self, pool: str) -> int | None:
        """The pool's count; None before the first decision (or for a pool it does not hold)."""
        with self._changed:
            return self._counts.get(pool)

    def set(self, pool: str, replicas: int) -> None:
        """Post a new count and wake the streams.

        Raises:
            ConfigError: ``pool`` is not one of its pools.
        """
        if pool not in self._known:
            msg = f"pool {pool!r} is not a KEDA pool (known: {', '.join(self.pools())})"
            raise ConfigError(msg)
        with self._changed:
            self._counts[pool] = replicas
            self._changes += 1
            self._changed.notify_all()

    def wake(self) -> None:
        """Wake every waiting stream without changing a count (a server closing)."""
        with self._changed:
            self._changes += 1
            self._changed.notify_all()

    def wait_change(self, seen: int, timeout_s: float) -> int:
        """Wait until the change counter passes ``seen`` (or ``timeout_s``); return the counter."""
        with self._changed:
            self._changed.wait_for(lambda: self._changes != seen, timeout=timeout_s)
            return self._changes

    def changes(self) -> int:
        """The change counter (how many counts were posted)."""
        with self._changed:
            return self._changes


class KedaConnector:
    """The connector of a KEDA pool: ``scale`` posts the count that the external scaler serves.

    KEDA's HPA owns the live count and reports nothing back here; give the pool's workload as ``reader``
    (a Kubernetes connector, used for ``get`` only) so the scaler starts from, and steps from, the count
    the pool really runs.
    """

    def __init__(self, pool: str, board: DesiredReplicas, reader: ScaleConnector | None = None) -> None:
        """Serve ``pool``'s count from ``board``; read the live count through ``reader`` where given."""
        self._pool = pool
        self._board = board
        self._reader = reader

    @property
    def kind(self) -> ConnectorKind:
        """``keda``."""
        return "keda"

    @property
    def target(self) -> str:
        """``keda/<pool>``: the metric a ScaledObject reads."""
        return f"keda/{self._pool}"

    def replicas(self) -> int | None:
        """The live count through the reader; without one, the count last posted (None before the first).

        Raises:
            BackendUnavailableError: the reader's API did not answer.
        """
        if self._reader is not None:
            return self._reader.replicas()
        return self._board.get(self._pool)

    def scale(self, replicas: int) -> str | None:
        """Post ``replicas`` for KEDA's next call (and push it to open streams)."""
        self._board.set(self._pool, replicas)
        return None

    def close(self) -> None:
        """Nothing to release: the pool's workloads outlive the scaler."""


class ExternalScalerServer:
    """KEDA's ``ExternalScaler`` service over a ``DesiredReplicas`` board, on ``host``:``port`` (0: any free)."""

    def __init__(self, board: DesiredReplicas, port: int, host: str = "127.0.0.1", *, max_workers: int = 8) -> None:
        """Bind the server (it serves once started).

        Raises:
            ConfigError: the address cannot be bound.
        """
        self._board = board
        self._stopped = threading.Event()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="keda"))
        self._server.add_generic_rpc_handlers((self._handlers(),))
        try:
            self.port = int(self._server.add_insecure_port(f"{host}:{port}"))
        except RuntimeError as exc:
            msg = f"KEDA external scaler port {host}:{port} cannot be bound ({exc}): choose another keda_port"
            raise ConfigError(msg) from exc

    def start(self) -> None:
        """Serve in gRPC's threads."""
        self._server.start()

    def close(self, grace_s: float = 1.0) -> None:
        """End open streams and stop serving."""
        self._stopped.set()
        self._board.wake()
        self._server.stop(grace_s).wait()

    def _handlers(self) -> Any:
        def unary(behaviour: Any, request_type: Any) -> Any:
            return grpc.unary_unary_rpc_method_handler(
                behaviour, request_deserializer=request_type.FromString, response_serializer=_serialize
            )

        return grpc.method_handlers_generic_handler(
            SERVICE_NAME,
            {
                "IsActive": unary(self.is_active, pb.ScaledObjectRef),
                "StreamIsActive": grpc.unary_stream_rpc_method_handler(
                    self.stream_is_active,
                    request_deserializer=pb.ScaledObjectRef.FromString,
                    response_serializer=_serialize,
                ),
                "GetMetricSpec": unary(self.get_metric_spec, pb.ScaledObjectRef),
                "GetMetrics": unary(self.get_metrics, pb.GetMetricsRequest),
            },
        )

    def is_active(self, request: pb.ScaledObjectRef, context: grpc.ServicerContext) -> pb.IsActiveResponse:
        """Whether the pool's count is above zero."""
        return pb.IsActiveResponse(result=self._count(request, context) > 0)

    def stream_is_active(
        self, request: pb.ScaledObjectRef, context: grpc.ServicerContext
    ) -> Iterator[pb.IsActiveResponse]:
        """The pool's activity once it has a count, then again after every change, until either side leaves."""
        pool = self._pool(request, context)
        last = None
        while context.is_active() and not self._stopped.is_set():
            seen = self._board.changes()
            count = self._board.get(pool)
            if count is not None and count != last:
                last = count
                yield pb.IsActiveResponse(result=count > 0)
            self._board.wait_change(seen, STREAM_RECHECK_S)

    def get_metric_spec(self, request: pb.ScaledObjectRef, context: grpc.ServicerContext) -> pb.GetMetricSpecResponse:
        """One metric per pool, target size 1: the HPA's replicas equal the metric's value."""
        pool = self._pool(request, context)
        spec = pb.MetricSpec(metricName=metric_name(pool), targetSize=1, targetSizeFloat=1.0)
        return pb.GetMetricSpecResponse(metricSpecs=[spec])

    def get_metrics(self, request: pb.GetMetricsRequest, context: grpc.ServicerContext) -> pb.GetMetricsResponse:
        """The pool's count as the metric's value."""
        count = self._count(request.scaledObjectRef, context)
        name = request.metricName or metric_name(self._pool(request.scaledObjectRef, context))
        value = pb.MetricValue(metricName=name, metricValue=count, metricValueFloat=float(count))
        return pb.GetMetricsResponse(metricValues=[value])

    def _pool(self, ref: pb.ScaledObjectRef, context: grpc.ServicerContext) -> str:
        pool = str(ref.scalerMetadata.get(POOL_METADATA_KEY, ""))
        if not self._board.knows(pool):
            known = ", ".join(self._board.pools())
            _abort(
                context,
                grpc.StatusCode.NOT_FOUND,
                f"ScaledObject {ref.namespace}/{ref.name}: metadata pool={pool!r} is not a pool of this scaler "
                f"(known: {known})",
            )
        return pool

    def _count(self, ref: pb.ScaledObjectRef, context: grpc.ServicerContext) -> int:
        pool = self._pool(ref, context)
        count = self._board.get(pool)
        if count is None:
            _abort(
                context,
                grpc.StatusCode.UNAVAILABLE,
                f"pool {pool!r} has no decision yet (no valid FleetOpt plan, or the scaler is in advisory mode)",
            )
        return count


def _abort(context: grpc.ServicerContext, code: grpc.StatusCode, details: str) -> NoReturn:
    """End the RPC with ``code`` and ``details``."""
    context.abort(code, details)
    # ServicerContext.abort always raises; grpc ships no types, so the checker is told here.
    raise AssertionError(details)


def _serialize(message: Any) -> bytes:
    return bytes(message.SerializeToString())
