"""Admission pressure: how hard an engine is pressed, from its queue, KV use and flow balance.

This is Governor's own policy, small but real: a gateway in front of several engines wants one
number per engine that says "send less here" before queues explode. Pressure combines three
signals, each mapped to [0, 1]:

- queue: waiting requests relative to the engine's running set (a queue as deep as the batch is
  full pressure);
- memory: KV-cache use above a comfort threshold (at 100% use, preemptions begin);
- flow: arrivals outpacing completions (a ratio of 1 is balanced, ``flow_saturation`` is full),
  counted only while requests wait: without a backlog, arrivals above completions are a ramp-up
  that the engine absorbs, not pressure.

The pressure is the largest of the three, smoothed with an asymmetric EMA (rise fast, fall slowly),
and mapped to a level with hysteresis so that it does not flap at a boundary.
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.bounds import Bound, Clamp, clamp
from policies.decision import Decision
from schemas.errors import InvalidInputError
from schemas.policy_docs.admission import AdmissionLevel, AdmissionPayload, AdmissionPolicy, AdmissionState


@dataclass(frozen=True, slots=True, kw_only=True)
class AdmissionParams:
    """Thresholds of the admission-pressure policy (Governor's own defaults)."""

    kv_comfort_frac: float = 0.85
    flow_saturation: float = 1.5
    smoothing_up: float = 0.5
    smoothing_down: float = 0.1
    busy_at: float = 0.6
    overloaded_at: float = 0.9
    hysteresis: float = 0.1
    valid_for_s: float = 30.0


@dataclass(frozen=True, slots=True, kw_only=True)
class AdmissionInputs:
    """The load estimates of one engine the policy reads."""

    num_waiting: float
    num_running: float
    kv_use_frac: float
    arrival_rate_per_s: float
    completion_rate_per_s: float

    def __post_init__(self) -> None:
        for name in ("num_waiting", "num_running", "arrival_rate_per_s", "completion_rate_per_s"):
            value = getattr(self, name)
            if not value >= 0.0:
                msg = f"{name} must be >= 0, got {value}"
                raise InvalidInputError(msg, field=name, value=value)
        if not 0.0 <= self.kv_use_frac <= 1.0:
            msg = f"kv_use_frac must be in [0, 1], got {self.kv_use_frac}"
            raise InvalidInputError(msg, field="kv_use_frac", value=self.kv_use_frac)


_FRACTION = Bound(name="pressure", lo=0.0, hi=1.0)
_LEVELS: tuple[AdmissionLevel, ...] = ("ok", "busy", "overloaded")


def raw_pressure(inputs: AdmissionInputs, params: AdmissionParams) -> tuple[float, float, float]:
    """Return the (queue, memory, flow) pressures, each in [0, 1]."""
    queue = min(1.0, inputs.num_waiting / max(1.0, inputs.num_running))
    memory = max(0.0, (inputs.kv_use_frac - params.kv_comfort_frac) / (1.0 - params.kv_comfort_frac))
    if inputs.completion_rate_per_s > 0.0:
        ratio = inputs.arrival_rate_per_s / inputs.completion_rate_per_s
    else:
        ratio = 1.0 if inputs.arrival_rate_per_s == 0.0 else params.flow_saturation
    flow = min(1.0, max(0.0, (ratio - 1.0) / (params.flow_saturation - 1.0))) if inputs.num_waiting >= 1.0 else 0.0
    return queue, min(1.0, memory), flow


def _level(pressure: float, previous: AdmissionLevel, params: AdmissionParams) -> AdmissionLevel:
    """Map pressure to a level; leaving a level downwards needs ``hysteresis`` below its threshold."""
    thresholds = {"busy": params.busy_at, "overloaded": params.overloaded_at}
    target: AdmissionLevel = "ok"
    if pressure >= params.overloaded_at:
        target = "overloaded"
    elif pressure >= params.busy_at:
        target = "busy"
    if _LEVELS.index(target) < _LEVELS.index(previous) and pressure > thresholds[previous] - params.hysteresis:
        return previous
    return target


def decide(
    inputs: AdmissionInputs, previous: AdmissionPolicy | None, params: AdmissionParams, now_s: float
) -> Decision[AdmissionPayload, AdmissionState]:
    """Decide the admission pressure of one engine from its load estimates and its previous document."""
    del now_s
    queue, memory, flow = raw_pressure(inputs, params)
    current = max(queue, memory, flow)
    if previous is None:
        smoothed, last_level = current, _LEVELS[0]
    else:
        weight = params.smoothing_up if current > previous.state.smoothed_pressure else params.smoothing_down
        smoothed = previous.state.smoothed_pressure + weight * (current - previous.state.smoothed_pressure)
        last_level = previous.state.level
    clamps: list[Clamp] = []
    smoothed = clamp(smoothed, _FRACTION, clamps)
    level = _level(smoothed, last_level, params)
    admit_fraction = {"ok": 1.0, "busy": 1.0 - 0.5 * smoothed, "overloaded": 0.1}[level]
    payload = AdmissionPayload(pressure=round(smoothed, 6), level=level, admit_fraction=round(admit_fraction, 6))
    state = AdmissionState(smoothed_pressure=smoothed, level=level)
    diagnostics = {"queue_pressure": queue, "memory_pressure": memory, "flow_pressure": flow, "raw_pressure": current}
    return Decision(
        payload=payload, state=state, diagnostics=diagnostics, clamps=tuple(clamps), valid_for_s=params.valid_for_s
    )
