"""The gateway file (TOML): static upstreams, the pool names FleetOpt routes between, queue and tier options.

Engines that run Governor's plugin announce their endpoint in ``engine.registered``; engines that do not are
listed here. A minimal file::

    [[upstreams]]
    engine_id = "short-0"
    url = "http://10.0.0.5:8000"
    model = "llama-8b"
    pool = "short"
    max_num_seqs = 256
    max_model_len = 8192

    [[upstreams]]            # two ranks of one data-parallel deployment, balanced by BF-IO
    engine_id = "dp-a:0"
    url = "http://10.0.0.6:8000"
    model = "llama-8b"
    pool = "long"
    dp_group = "dp-a"
    dp_rank = 0

The file is read once at start; a bad file is refused with the file, the field and the reason.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, model_validator

from schemas.envelope import Identifier, Label
from schemas.errors import ConfigError
from schemas.policy_docs.base import ContractModel

DEFAULT_MAX_NUM_SEQS = 256  # vLLM's default max_num_seqs
DEFAULT_MAX_MODEL_LEN = 1 << 20  # unknown context window: every request fits


class StaticUpstream(ContractModel):
    """One engine the gateway sends requests to without it registering."""

    engine_id: Identifier
    url: str = Field(pattern=r"^https?://[^\s]+$", max_length=2048, description="base URL (without /v1)")
    model: str = Field(min_length=1, max_length=256, description="the model name clients ask for")
    pool: Label = "default"
    dp_group: Identifier | None = Field(default=None, description="DP deployment (BF-IO scope) this rank belongs to")
    dp_rank: int | None = Field(default=None, ge=0, le=4096)
    max_num_seqs: int = Field(default=DEFAULT_MAX_NUM_SEQS, ge=1, le=1_000_000)
    max_model_len: int = Field(default=DEFAULT_MAX_MODEL_LEN, ge=1, le=1 << 24)

    @model_validator(mode="after")
    def _rank_with_group(self) -> StaticUpstream:
        if (self.dp_group is None) != (self.dp_rank is None):
            msg = f"upstream {self.engine_id}: dp_group and dp_rank go together"
            raise ValueError(msg)
        return self


class RoutingOptions(ContractModel):
    """Which pools FleetOpt's short and long are, and how a request without ``max_tokens`` is sized."""

    short_pool: Label = "short"
    long_pool: Label = "long"
    fleet_scope: Identifier = Field(default="fleet", description="scope of the FleetOpt plan the gateway obeys")
    default_max_tokens: int = Field(
        default=256, ge=1, le=1 << 24, description="L_out assumed for a request that names no max_tokens"
    )


class QueueOptions(ContractModel):
    """The per-pool waiting queue used when every candidate upstream is overloaded."""

    max_waiting: int = Field(default=1024, ge=0, le=1_000_000, description="requests a pool's queue holds")
    deadline_s: float = Field(default=5.0, gt=0.0, le=3600.0, description="longest wait before a 429")
    recheck_s: float = Field(
        default=0.05, gt=0.0, le=60.0, description="how often waiters re-read the admission documents"
    )
    paying_tiers: list[Label] = Field(default_factory=lambda: ["paid"], description="tiers served first")
    seed: int = Field(default=0, ge=0, description="seed of the admit_fraction draws")


DpBalancer = Literal["bfio", "round_robin", "vllm_score"]


class BfioOptions(ContractModel):
    """How requests are placed on the ranks of data-parallel groups.

    ``bfio`` (the default) is the central waiting pool under the pushed bundle, JSQ-by-load without one;
    ``round_robin`` and ``vllm_score`` are the baselines it is measured against (services/gateway/ranks.py):
    each places a request at once, as vLLM's own front end does, and lets the ranks queue.
    """

    tick_s: float = Field(default=0.02, gt=0.0, le=10.0, description="assignment tick, near the ranks' step time")
    balancer: DpBalancer = Field(default="bfio", description="bfio (central pool) or a baseline")


class GatewayConfig(ContractModel):
    """The whole gateway file."""

    upstreams: list[StaticUpstream] = Field(default_factory=list, max_length=4096)
    routing: RoutingOptions = Field(default_factory=RoutingOptions)
    queue: QueueOptions = Field(default_factory=QueueOptions)
    bfio: BfioOptions = Field(default_factory=BfioOptions)

    @model_validator(mode="after")
    def _unique_ids(self) -> GatewayConfig:
        ids = [u.engine_id for u in self.upstreams]
        repeated = sorted({i for i in ids if ids.count(i) > 1})
        if repeated:
            msg = f"upstream engine_id repeated: {repeated}"
            raise ValueError(msg)
        return self


def read_gateway_config(path: Path | None) -> GatewayConfig:
    """Read and validate the gateway file; None gives the defaults (no static upstreams).

    Raises:
        ConfigError: the file is missing, not TOML, or fails validation (the message names the field).
    """
    if path is None:
        return GatewayConfig()
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        msg = f"{path}: {exc}"
        raise ConfigError(msg) from exc
    try:
        return GatewayConfig.model_validate(raw, strict=False)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "<file>"
        msg = f"{path}: {where}: {first['msg']}"
        raise ConfigError(msg) from exc
