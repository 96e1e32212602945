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
    """How the local connector starts one replica of a pool: a command with ``{port}`` in it."""

    command: list[str] = Field(min_length=1, description="argv; '{port}' is replaced by the replica's port")
    first_port: int = Field(ge=1024, le=65535, description="replica i listens on first_port + i")
    drain_timeout_s: float = Field(default=30.0, gt=0.0, le=3600.0, allow_inf_nan=False)


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
    pools: dict[Name, ScalerPoolConfig] = Field(min_length=1)


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
    detail: str | None = Field(default=None, max_length=1024, description="the connector's error, when it failed")
