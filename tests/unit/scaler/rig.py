"""A scaler over in-memory pools, a static plan source and a list sink, on a clock the test moves."""

from __future__ import annotations

from schemas.scaling import ScalerConfig, ScalingAction
from services.health import ServiceMetrics
from services.scaler import ListActionSink, MemoryConnector, ScalerMetrics, ScalerService
from services.sdk.protocol import StaticPolicySource
from services.testing.plans import fleetopt_plan


class Clock:
    """Event time the test moves by hand."""

    def __init__(self, now_s: float) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s


def scaler_config(mode: str = "act", **short: object) -> ScalerConfig:
    pools = {
        "short": {
            "min_replicas": 1,
            "max_replicas": 6,
            "gpus_per_replica": 2,
            "max_step_replicas": 2,
            "cooldown_s": 30.0,
            "scale_down_hold_s": 120.0,
            "connector": "memory",
            **short,
        },
        "long": {"min_replicas": 1, "max_replicas": 4, "cooldown_s": 30.0, "connector": "memory"},
    }
    return ScalerConfig.model_validate({"mode": mode, "pools": pools})


class Rig:
    """A scaler over in-memory pools, a static plan source and a list sink."""

    def __init__(self, config: ScalerConfig, *, short: int = 1, long: int = 1, fail_with: str | None = None) -> None:
        self.clock = Clock(1000.0)
        self.plans = StaticPolicySource()
        self.sink = ListActionSink()
        self.connectors = {
            "short": MemoryConnector("short", short, fail_with=fail_with),
            "long": MemoryConnector("long", long),
        }
        self.metrics = ServiceMetrics("scaler", "test")
        self.service = ScalerService(
            config=config,
            deployment="test",
            scaler_id="scaler-0",
            plans=self.plans,
            connectors=self.connectors,
            sink=self.sink,
            metrics=ScalerMetrics(self.metrics),
            clock=self.clock,
        )

    def push(self, *, short_gpus: int, long_gpus: int, version: int) -> None:
        self.plans.put(
            fleetopt_plan(short_gpus=short_gpus, long_gpus=long_gpus, version=version, computed_at=self.clock.now_s)
        )

    def at(self, now_s: float) -> list[ScalingAction]:
        self.clock.now_s = now_s
        return self.service.step()
