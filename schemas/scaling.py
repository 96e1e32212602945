"""The scaler's contracts: its configuration file and the action events it appends to ``gov.scaling``.

``ScalerConfig`` is the TOML file ``governor scale --config`` reads (docs/scaler.md): one table per
pool with its limits and its connector. ``ScalingAction`` is one change the scaler made, or would
have made in advisory mode, to one pool: from and to how many replicas, the plan version and event
time it followed, the rule that decided it and what the connector answered. Every action is
appended to ``gov.scaling`` keyed by pool, so the log explains every size a pool ever had.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from schemas.policy_docs.base import ContractModel

SCALING_TOPIC = "gov.scaling"
SCALING_SCHEMA_VERSION = 1

Name = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.-]+$")]
EnvName = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
KubernetesName = Annotated[
    str, Field(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", description="RFC 1123")
]
ScalerMode = Literal["act", "advisory"]
ScalerClock = Literal["wall", "plan"]
ConnectorKind = Literal["keda", "kubernetes", "local", "memory"]
ScaleTargetKind = Literal["Deployment", "StatefulSet", "LeaderWorkerSet"]
ScaleReasonName = Literal[
    "at_target", "scale_up", "scale_down", "out_of_bounds", "cooling_down", "scale_down_held", "no_plan"
]
ConnectorResult = Literal["applied", "advisory", "failed"]


class KubernetesTarget(ContractModel):
    """The workload whose ``scale`` subresource a pool resizes."""

    kind: ScaleTargetKind = "Deployment"
    namespace: KubernetesName = "default"
    name: KubernetesName


class LocalEngineSpec(ContractModel):
    """How the local connector starts, checks and stops one replica of a pool (services/scaler/local_engines.py).

    ``command`` is the replica's argv with ``{port}`` (and optionally ``{engine_id}``) in it; replica slot i
    listens on ``first_port + i`` at ``host``. It counts once ``GET /health`` answers 200 (within
    ``start_timeout_s``); it is drained for at most ``drain_timeout_s`` before it is stopped, and a stop
    is SIGTERM, then SIGKILL after ``stop_timeout_s``.
    """

    command: list[str] = Field(min_length=1, description="argv; '{port}' is replaced by the replica's port")
    first_port: int = Field(ge=1024, le=65535, description="replica i listens on first_port + i")
    host: str = Field(default="127.0.0.1", min_length=1, max_length=253, description="where the replicas listen")
    model: str | None = Field(
        default=None, min_length=1, max_length=256, description="the served model name the gateway routes by"
    )
    env: dict[EnvName, str] = Field(default_factory=dict, description="added to each replica's environment")
    log_dir: str | None = Field(default=None, max_length=1024, description="each replica's output goes here")
    start_timeout_s: float = Field(default=600.0, gt=0.0, le=7200.0, allow_inf_nan=False)
    drain_timeout_s: float = Field(default=30.0, gt=0.0, le=3600.0, allow_inf_nan=False)
    stop_timeout_s: float = Field(default=30.0, gt=0.0, le=600.0, allow_inf_nan=False)


class GatewayAdminConfig(ContractModel):
    """Where the gateway's admin API is (docs/gateway.md), for the local connector to register and drain replicas."""

    url: str = Field(min_length=1, max_length=1024, pattern=r"^https?://", description="the gateway's base URL")
    token_file: str | None = Field(
        default=None, max_length=1024, description="file holding the admin bearer token, where the gateway needs one"
    )
    timeout_s: float = Field(default=5.0, gt=0.0, le=120.0, allow_inf_nan=False, description="per admin call")


class ScalerPoolConfig(ContractModel):
    """One pool's limits (policies/scaling/rules.py ``PoolLimits``) and the connector that resizes it."""

    min_replicas: int = Field(default=0, ge=0, le=100_000)
    max_replicas: int = Field(ge=1, le=100_000)
    gpus_per_replica: int = Field(default=1, ge=1, le=1024, description="GPUs one replica holds: its TP size")
    max_step_replicas: int = Field(default=1, ge=1, le=100_000, description="largest change in one action")
    cooldown_s: float = Field(default=60.0, ge=0.0, le=86_400.0, allow_inf_nan=False)
    scale_down_hold_s: float = Field(default=300.0, ge=0.0, le=86_400.0, allow_inf_nan=False)
    pinned_replicas: int | None = Field(default=None, ge=0, le=100_000, description="fixed size; the plan is ignored")
    initial_replicas: int | None = Field(
        default=None, ge=0, le=100_000, description="the size assumed at start where the connector cannot read one"
    )
    connector: ConnectorKind
    kubernetes: KubernetesTarget | None = None
    local: LocalEngineSpec | None = None

    @model_validator(mode="after")
    def _check(self) -> ScalerPoolConfig:
        if self.max_replicas < self.min_replicas:
            msg = f"max_replicas ({self.max_replicas}) must be >= min_replicas ({self.min_replicas})"
            raise ValueError(msg)
        if self.connector == "kubernetes" and self.kubernetes is None:
            msg = "connector 'kubernetes' needs a [pools.<name>.kubernetes] table (kind, namespace, name)"
            raise ValueError(msg)
        if self.connector == "local" and self.local is None:
            msg = "connector 'local' needs a [pools.<name>.local] table (command, first_port)"
            raise ValueError(msg)
        return self


class ScalerConfig(ContractModel):
    """The scaler's configuration file: the mode, the interval, the policy scope and each pool."""

    mode: ScalerMode = Field(default="advisory", description="advisory records actions without performing them")
    clock: ScalerClock = Field(
        default="wall",
        description="wall: passes run at the wall clock (live telemetry's event time) and stale plans are not "
        "followed; plan: time is the newest plan's computed_at (simulated fleets, replays)",
    )
    interval_s: float = Field(default=5.0, gt=0.0, le=3600.0, allow_inf_nan=False, description="seconds per pass")
    scope: Name = Field(default="fleet", description="scope of the FleetOpt document to follow")
    keda_port: int | None = Field(default=None, ge=0, le=65535, description="gRPC port of the KEDA external scaler")
    gateway: GatewayAdminConfig | None = Field(
        default=None, description="the gateway local replicas are registered with and drained through"
    )
    pools: dict[Name, ScalerPoolConfig] = Field(min_length=1)


class ActionLimits(ContractModel):
    """The limits of a pool as the rules applied them to one action (policies/scaling/rules.py ``PoolLimits``)."""

    min_replicas: int = Field(ge=0)
    max_replicas: int = Field(ge=1)
    max_step_replicas: int = Field(ge=1)
    cooldown_s: float = Field(ge=0.0, allow_inf_nan=False)
    scale_down_hold_s: float = Field(ge=0.0, allow_inf_nan=False)
    pinned_replicas: int | None = Field(default=None, ge=0)


class ScalingAction(ContractModel):
    """One resize of one pool, made or (advisory) only recorded; appended to ``gov.scaling`` keyed by pool."""

    schema_version: int = Field(default=SCALING_SCHEMA_VERSION, ge=1, le=SCALING_SCHEMA_VERSION)
    event_type: Literal["scaler.action"] = "scaler.action"
    event_id: str = Field(min_length=1, max_length=128)
    ts: float = Field(ge=0.0, allow_inf_nan=False, description="event time of the decision, seconds")
    deployment: Name
    scaler_id: Name
    seq: int = Field(ge=0, description="per-scaler monotonic sequence number")
    pool: Name
    connector: ConnectorKind
    target: str | None = Field(default=None, max_length=512, description="what was resized: Kind/namespace/name")
    from_replicas: int = Field(ge=0)
    to_replicas: int = Field(ge=0)
    desired_replicas: int | None = Field(ge=0, description="the count the plan (or the pin) wants; None: no plan")
    gpus_per_replica: int = Field(ge=1)
    plan_version: int | None = Field(ge=1, description="the FleetOpt document followed")
    plan_computed_at: float | None = Field(ge=0.0, allow_inf_nan=False, description="its computed_at, seconds")
    reason: ScaleReasonName
    pinned: bool
    mode: ScalerMode
    result: ConnectorResult
    detail: str | None = Field(
        default=None,
        max_length=1024,
        description="the connector's error when it failed, or what it had to do (a replica stopped undrained)",
    )
    plan_gpus: int | None = Field(default=None, ge=0, description="the plan's GPUs for the pool; None: no plan")
    limits: ActionLimits | None = Field(default=None, description="the pool's limits the rules applied")
    previous_change_ts: float | None = Field(
        default=None, ge=0.0, allow_inf_nan=False, description="event time of the pool's change before this, s"
    )
    down_since_ts: float | None = Field(
        default=None,
        ge=0.0,
        allow_inf_nan=False,
        description="scale-downs: event time since which the plan wanted fewer replicas (the hold's start), s",
    )
    down_peak_replicas: int | None = Field(
        default=None, ge=0, description="scale-downs: the largest count wanted while the hold ran"
    )
