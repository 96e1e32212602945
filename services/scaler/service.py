"""``ScalerService``: the loop that carries FleetOpt's pool sizes to each pool's connector (DESIGN section 7a).

Every ``interval_s`` it reads the FleetOpt document of its scope from a ``PolicySource`` (the SDK's
``PolicyClient``: a cache refreshed in the background, so a pass never waits on Redis), turns the
plan's fleet half into per-pool targets, asks the pure rules (policies/scaling) for each pool's
change, makes it through the pool's connector, and appends every change to ``gov.scaling``.

- Event time: on the ``wall`` clock (the default) ``clock`` gives the time the pass runs at: live,
  the wall clock, which is the event time of live telemetry and of the plans decided from it; a plan
  past its ``valid_until`` is not followed (the pools are left alone: no scaling on a stale plan). On
  the ``plan`` clock (simulated fleets and replays, whose event time is not the wall's) time is the
  newest plan's ``computed_at``.
- Advisory mode computes and records every action (``result: advisory``) and calls no connector.
  Its memory moves as if the action had been made, so the advisory log is the trace the pools
  would have followed.
- A connector that reports what it had to do (the local connector stopping a replica at its drain
  timeout) has that on the action's ``detail``.
- A connector that fails is recorded (``result: failed`` with its error); the pool keeps its
  count and the next try waits for the pool's cool-down, so a broken API is not hammered.
- Pins: ``governor pin fleetopt ...`` changes the document itself, so it reaches the pools here;
  a pool's ``pinned_replicas`` in the scaler's config fixes its size whatever the plan says.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import structlog
from prometheus_client import Counter, Gauge

from policies.scaling import PlanTarget, PoolDecision, PoolLimits, PoolMemory, decide_pool, plan_targets
from schemas.errors import BackendUnavailableError
from schemas.policy_docs.base import PolicyDocument
from schemas.policy_docs.fleetopt import FleetoptPolicy
from schemas.scaling import ActionLimits, ConnectorResult, ScalerConfig, ScalerPoolConfig, ScalingAction
from services.health import SERVICE_LABELS, ServiceMetrics
from services.scaler.actions import ActionSink
from services.scaler.connector import ScaleConnector
from services.sdk.protocol import PolicySource

log = structlog.get_logger(__name__)


def pool_limits(pool: ScalerPoolConfig) -> PoolLimits:
    """The pure rules' limits of a configured pool."""
    return PoolLimits(
        min_replicas=pool.min_replicas,
        max_replicas=pool.max_replicas,
        gpus_per_replica=pool.gpus_per_replica,
        max_step_replicas=pool.max_step_replicas,
        cooldown_s=pool.cooldown_s,
        scale_down_hold_s=pool.scale_down_hold_s,
        pinned_replicas=pool.pinned_replicas,
    )


class ScalerMetrics:
    """The scaler's series beside every service's own: per pool, the count, the count wanted, the actions."""

    def __init__(self, service: ServiceMetrics) -> None:
        """Register the series in ``service``'s registry, labelled with its deployment and service."""
        self.service = service
        labels = (*SERVICE_LABELS, "pool")
        registry = service.registry
        self._replicas = Gauge(
            "governor_scaler_replicas", "replicas the pool runs (or, advisory, would run)", labels, registry=registry
        )
        self._desired = Gauge(
            "governor_scaler_desired_replicas",
            "replicas the plan or the pin wants, within the bounds",
            labels,
            registry=registry,
        )
        self._plan_version = Gauge(
            "governor_scaler_plan_version",
            "version of the FleetOpt document the pool follows",
            labels,
            registry=registry,
        )
        self._actions = Counter(
            "governor_scaler_actions",
            "scaling actions, by reason and connector result",
            (*labels, "reason", "result"),
            registry=registry,
        )

    def observed(self, pool: str, decision: PoolDecision) -> None:
        """Export one pool's state after a pass."""
        base = (self.service.deployment, self.service.service, pool)
        self._replicas.labels(*base).set(decision.memory.replicas)
        if decision.desired_replicas is not None:
            self._desired.labels(*base).set(decision.desired_replicas)
        if decision.plan_version is not None:
            self._plan_version.labels(*base).set(decision.plan_version)

    def acted(self, action: ScalingAction) -> None:
        """Count one action."""
        self._actions.labels(
            self.service.deployment, self.service.service, action.pool, action.reason, action.result
        ).inc()


@dataclass(frozen=True, slots=True, kw_only=True)
class ScalerCounters:
    """What a run did: passes, actions recorded, actions the connector failed, actions the log did not take."""

    passes: int
    actions: int
    failed: int
    unrecorded: int


class ScalerService:
    """Drives each configured pool towards the FleetOpt plan through its connector."""

    def __init__(
        self,
        *,
        config: ScalerConfig,
        deployment: str,
        scaler_id: str,
        plans: PolicySource,
        connectors: Mapping[str, ScaleConnector],
        sink: ActionSink,
        metrics: ScalerMetrics,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Wire the pools; each starts from its connector's count, else ``initial_replicas``, else its minimum.

        Raises:
            BackendUnavailableError: a connector could not read its pool's count.
        """
        self._config = config
        self._deployment = deployment
        self._scaler_id = scaler_id
        self._plans = plans
        self._connectors = dict(connectors)
        self._sink = sink
        self._metrics = metrics
        self._clock = clock
        self._limits = {name: pool_limits(pool) for name, pool in config.pools.items()}
        self._memory: dict[str, PoolMemory] = {}
        for name, pool in config.pools.items():
            observed = self._connectors[name].replicas()
            start = observed if observed is not None else pool.initial_replicas
            self._memory[name] = PoolMemory(replicas=pool.min_replicas if start is None else start)
        self._plan_now_s = 0.0
        self._seq = 0
        self._passes = 0
        self._actions = 0
        self._failed = 0
        self._unrecorded = 0
        self._stopped = threading.Event()

    @property
    def advisory(self) -> bool:
        """Whether actions are recorded only."""
        return self._config.mode == "advisory"

    def resume(self, actions: list[ScalingAction]) -> int:
        """Carry this scaler's earlier actions (``gov.scaling``, log order) across a restart; return how many it used.

        Each pool's last action of this ``scaler_id`` in the current mode restarts its cool-down from that
        action's time, and the sequence numbers go on after the last one. In advisory mode, whose counts
        are the scaler's own, the pool's count is the one that action set. The hold is not carried: a
        pending scale-down starts waiting again, the safe side.
        """
        mine = [a for a in actions if a.scaler_id == self._scaler_id and a.deployment == self._deployment]
        if not mine:
            return 0
        self._seq = max(a.seq for a in mine) + 1
        used = 0
        for action in mine:
            memory = self._memory.get(action.pool)
            if memory is None or action.mode != self._config.mode or action.result == "failed":
                continue
            replicas = action.to_replicas if self.advisory else memory.replicas
            self._memory[action.pool] = replace(memory, replicas=replicas, last_change_s=action.ts)
            used += 1
        return used

    def replicas(self) -> dict[str, int]:
        """Each pool's count as the scaler knows it."""
        return {name: memory.replicas for name, memory in self._memory.items()}

    def step(self) -> list[ScalingAction]:
        """One pass over every pool at the clock's time; return the actions recorded."""
        now_s, document = self._now_and_plan()
        targets = plan_targets(document) if isinstance(document, FleetoptPolicy) else {}
        actions = []
        for name in sorted(self._config.pools):
            action = self._step_pool(name, targets.get(name), now_s)
            if action is not None:
                actions.append(action)
        self._passes += 1
        self._metrics.service.progressed()
        if actions:
            self._metrics.service.folded()
        return actions

    def _now_and_plan(self) -> tuple[float, PolicyDocument | None]:
        """The pass's event time and the FleetOpt document in force then.

        On the ``plan`` clock time is the newest plan's ``computed_at``: a newer document is valid at the
        previous one's time, so the newest is always returned, and cool-downs and holds count in plan time.
        """
        scope = self._config.scope
        if self._config.clock == "wall":
            now_s = self._clock()
            return now_s, self._plans.current("fleetopt", scope, now_s)
        document = self._plans.current("fleetopt", scope, self._plan_now_s)
        if document is not None:
            self._plan_now_s = max(self._plan_now_s, document.computed_at)
        return self._plan_now_s, document

    def _step_pool(self, name: str, target: PlanTarget | None, now_s: float) -> ScalingAction | None:
        connector = self._connectors[name]
        memory = self._memory[name]
        if not self.advisory:
            try:
                observed = connector.replicas()
            except BackendUnavailableError as exc:
                log.warning("scaler_pool_unread", pool=name, target=connector.target, error=str(exc))
                return None
            if observed is not None and observed != memory.replicas:
                memory = replace(memory, replicas=observed)
        decision = decide_pool(self._limits[name], memory, target, now_s)
        self._memory[name] = decision.memory
        if not decision.changed:
            self._metrics.observed(name, decision)
            return None
        result: ConnectorResult = "advisory"
        detail = None
        if not self.advisory:
            try:
                detail = connector.scale(decision.to_replicas)
                result = "applied"
            except BackendUnavailableError as exc:
                result, detail = "failed", str(exc)[:1024]
                self._memory[name] = replace(decision.memory, replicas=decision.from_replicas)
                self._failed += 1
        action = self._action(
            name=name, decision=decision, connector=connector, target=target, result=result, detail=detail, now_s=now_s
        )
        self._metrics.observed(name, decision)
        self._metrics.acted(action)
        self._actions += 1
        if not self._sink.record(action):
            self._unrecorded += 1
        log.info(
            "pool_scaled" if result != "failed" else "pool_scale_failed",
            pool=name,
            from_replicas=action.from_replicas,
            to_replicas=action.to_replicas,
            desired_replicas=action.desired_replicas,
            reason=action.reason,
            result=result,
            plan_version=action.plan_version,
            target=action.target,
        )
        return action

    def _action(
        self,
        *,
        name: str,
        decision: PoolDecision,
        connector: ScaleConnector,
        target: PlanTarget | None,
        result: ConnectorResult,
        detail: str | None,
        now_s: float,
    ) -> ScalingAction:
        seq = self._seq
        self._seq += 1
        limits = self._limits[name]
        return ScalingAction(
            event_id=f"{self._scaler_id}-{int(now_s * 1000)}-{seq}",
            ts=now_s,
            deployment=self._deployment,
            scaler_id=self._scaler_id,
            seq=seq,
            pool=name,
            connector=connector.kind,
            target=connector.target,
            from_replicas=decision.from_replicas,
            to_replicas=decision.to_replicas,
            desired_replicas=decision.desired_replicas,
            gpus_per_replica=self._limits[name].gpus_per_replica,
            plan_version=decision.plan_version,
            plan_computed_at=None if target is None else target.computed_at_s,
            reason=decision.reason.value,
            pinned=decision.pinned,
            mode=self._config.mode,
            result=result,
            detail=detail,
            plan_gpus=None if target is None else target.n_gpus,
            limits=ActionLimits(
                min_replicas=limits.min_replicas,
                max_replicas=limits.max_replicas,
                max_step_replicas=limits.max_step_replicas,
                cooldown_s=limits.cooldown_s,
                scale_down_hold_s=limits.scale_down_hold_s,
                pinned_replicas=limits.pinned_replicas,
            ),
            previous_change_ts=decision.previous_change_s,
            down_since_ts=decision.down_since_s,
            down_peak_replicas=decision.down_peak_replicas,
        )

    def run(self, *, idle_exit_s: float | None = None) -> ScalerCounters:
        """Pass every ``interval_s`` until ``stop`` (or, with ``idle_exit_s``, until that long without an action)."""
        last_action_s = time.monotonic()
        while not self._stopped.is_set():
            try:
                if self.step():
                    last_action_s = time.monotonic()
            except Exception:
                log.exception("scaler_pass_failed")
            if idle_exit_s is not None and time.monotonic() - last_action_s >= idle_exit_s:
                break
            self._stopped.wait(self._config.interval_s)
        return self.counters()

    def counters(self) -> ScalerCounters:
        """What the service did so far."""
        return ScalerCounters(
            passes=self._passes, actions=self._actions, failed=self._failed, unrecorded=self._unrecorded
        )

    def stop(self) -> None:
        """End ``run`` after its current pass."""
        self._stopped.set()

    def close(self) -> None:
        """Close every connector (the local one stops its processes), then the log's connection."""
        for name in sorted(self._connectors):
            try:
                self._connectors[name].close()
            except Exception:
                log.exception("connector_close_failed", pool=name)
        self._sink.close()
