"""Engine-side EB(k) phase machine with the KV-aware gate (specs/seed-001-ebplus.md section 3.4; paper Eq. 23).

The engine runs this every iteration with the last valid EB+ document (DESIGN principle 5); it is pure
and simulator-independent, over a small typed view of the engine. Phases:

- INITIAL_PREFILL (phase 0): prefill until N requests are decoding (or nothing waits).
- DECODE (phase 1): decode only; refill once fillable (N - k) >= n k (k completions under saturation,
  the ratio theta / (1 - theta) under light load) and the KV gate passes:
  free_blocks >= f_KV total_blocks, f_KV = min(f_max, max(f_min, N mu_O s_KV / (b total_blocks) + f0)).
- REFILL (phase 2): prefill the fillable slots, no decode; back to DECODE when done, when nothing
  waits, when KV falls below the gate (pending chunked prefills preempted) or when all slots are busy.
- MIXED: mixed batching (MB), the mode pushed as "MB" and the fallback for a missing or stale policy
  (past its ``valid_until``) -- the reference code's cold-start mode.

Deviation: the reference code's N recovery resets N to max_num_seqs; here the pushed N is a hard cap
(spec section 8 P6), so recovery restores min(pushed N, max_num_seqs). The KV escape in phase 0
shrinks N to min(adaptive N, decoding) with adaptive N = capacity (1 - f_KV) / (mu_L + mu_O / 2) using
the pushed means, where the code averages the first 50 running and 50 waiting prompts and uses a
separate reserve; both keep the floor max(16, max_num_seqs / 10).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import NamedTuple

from schemas.errors import InvalidInputError
from schemas.policy_docs.ebplus import EbplusMode, EbplusPayload, EbplusPolicy, KvGate

N_UPDATE_COOLDOWN_S = 2.0  # code VLLM_PD_N_UPDATE_COOLDOWN: N recovery at most every 2 s
_ESCAPE_FLOOR_SEQS = 16  # code: escape N floor max(16, max_num_seqs / 10)
_MAX_TRANSITIONS_PER_STEP = 4


class Phase(enum.StrEnum):
    """Where the engine is in the EB(k) cycle, or MIXED for mixed batching."""

    MIXED = "mixed"
    INITIAL_PREFILL = "initial_prefill"
    DECODE = "decode"
    REFILL = "refill"


class StepKind(enum.StrEnum):
    """What the engine schedules this iteration."""

    MIXED = "mixed"
    PREFILL = "prefill"
    DECODE = "decode"
    IDLE = "idle"


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineView:
    """What the phase machine reads from the engine at an iteration boundary.

    Attributes:
        now_s: event time, seconds.
        waiting_seqs: requests queued, not yet admitted.
        decoding_seqs: admitted requests whose prefill is done.
        prefilling_seqs: admitted requests with a chunked prefill in progress.
        kv_free_blocks: free KV blocks.
        kv_total_blocks: total KV blocks (> 0).
        block_size_tokens: tokens per KV block (> 0).
        max_num_seqs: the engine's slot limit (>= 1).
    """

    now_s: float
    waiting_seqs: int
    decoding_seqs: int
    prefilling_seqs: int
    kv_free_blocks: int
    kv_total_blocks: int
    block_size_tokens: int
    max_num_seqs: int

    def __post_init__(self) -> None:
        """Refuse negative counts, empty totals and a non-finite time.

        An engine builds one view per iteration, so the common case is one comparison chain; the
        field-by-field check below runs only to name what is wrong.
        """
        if (
            min(self.waiting_seqs, self.decoding_seqs, self.prefilling_seqs, self.kv_free_blocks) >= 0
            and min(self.kv_total_blocks, self.block_size_tokens, self.max_num_seqs) >= 1
            and math.isfinite(self.now_s)
        ):
            return
        counts = (
            ("waiting_seqs", self.waiting_seqs, 0),
            ("decoding_seqs", self.decoding_seqs, 0),
            ("prefilling_seqs", self.prefilling_seqs, 0),
            ("kv_free_blocks", self.kv_free_blocks, 0),
            ("kv_total_blocks", self.kv_total_blocks, 1),
            ("block_size_tokens", self.block_size_tokens, 1),
            ("max_num_seqs", self.max_num_seqs, 1),
        )
        for name, value, lo in counts:
            if value < lo:
                msg = f"EngineView.{name} must be >= {lo}, got {value}"
                raise InvalidInputError(msg, field=name, value=value)
        if not math.isfinite(self.now_s):
            msg = f"EngineView.now_s must be finite, got {self.now_s}"
            raise InvalidInputError(msg, field="now_s", value=self.now_s)

    @property
    def running_seqs(self) -> int:
        """Admitted requests: decoding plus prefilling."""
        return self.decoding_seqs + self.prefilling_seqs


class PhaseState(NamedTuple):
    """The phase machine's memory between iterations (engine-local, never published).

    This and the other records ``advance`` builds every iteration are named tuples: as immutable as
    frozen dataclasses and cheaper to build, which an engine's step path pays on every step
    (ops/bench/bench_ebplus_step.py).

    Attributes:
        phase: current phase.
        n_seqs: N in effect (<= pushed N and max_num_seqs); 0 in MIXED.
        refill_target_seqs: requests to prefill in the current REFILL phase.
        decoding_at_phase_start: decoding_seqs when the current prefill phase began.
        last_n_update_s: event time N was last raised by recovery, or None.
    """

    phase: Phase = Phase.MIXED
    n_seqs: int = 0
    refill_target_seqs: int = 0
    decoding_at_phase_start: int = 0
    last_n_update_s: float | None = None


class PhaseAction(NamedTuple):
    """What the engine does this iteration.

    Attributes:
        kind: MIXED (the engine's own mixed batching), PREFILL, DECODE or IDLE.
        admit_seqs: new requests the engine may start prefilling (MIXED: free slots).
        preempt_prefills: drop in-progress chunked prefills back to waiting (KV escape).
        phase: phase after this step.
        n_seqs: N in effect (0 in MIXED).
        k_seqs: k in effect (0 in MIXED).
        fallback: True when the policy was missing or stale.
    """

    kind: StepKind
    admit_seqs: int
    preempt_prefills: bool
    phase: Phase
    n_seqs: int
    k_seqs: int
    fallback: bool


class PhaseStep(NamedTuple):
    """One step's action and the state to pass to the next step."""

    action: PhaseAction
    state: PhaseState


def live_payload(policy: EbplusPolicy | None, now_s: float) -> EbplusPayload | None:
    """Return the policy's payload when it exists and ``now_s`` is not past its ``valid_until``, else None."""
    if policy is None or now_s > policy.valid_until:
        return None
    return policy.payload


def kv_gate_fraction(*, gate: KvGate, n_seqs: int, mu_o_tokens: float, view: EngineView) -> float:
    """f_KV of Eq. 23: the free-block fraction the engine must hold before a refill."""
    expected = n_seqs * mu_o_tokens * gate.s_kv / (view.block_size_tokens * view.kv_total_blocks) + gate.f0
    return min(gate.f_max, max(gate.f_min, expected))


def kv_gate_passes(*, gate: KvGate, n_seqs: int, mu_o_tokens: float, view: EngineView) -> bool:
    """Eq. 23: free_blocks >= f_KV * total_blocks."""
    fraction = kv_gate_fraction(gate=gate, n_seqs=n_seqs, mu_o_tokens=mu_o_tokens, view=view)
    return view.kv_free_blocks >= fraction * view.kv_total_blocks


def _gate_ok(payload: EbplusPayload, n_seqs: int, view: EngineView) -> bool:
    return kv_gate_passes(gate=payload.kv_gate, n_seqs=n_seqs, mu_o_tokens=payload.mu_o_tokens, view=view)


def _k(theta: float, n_seqs: int) -> int:
    return max(1, min(n_seqs, math.floor(theta * n_seqs)))


def _action(kind: StepKind, state: PhaseState, theta: float, *, admit: int = 0, preempt: bool = False) -> PhaseStep:
    k_seqs = _k(theta, state.n_seqs) if state.n_seqs > 0 else 0
    action = PhaseAction(
        kind=kind,
        admit_seqs=max(0, admit),
        preempt_prefills=preempt,
        phase=state.phase,
        n_seqs=state.n_seqs,
        k_seqs=k_seqs,
        fallback=False,
    )
    return PhaseStep(action=action, state=state)


def _mixed(view: EngineView, *, fallback: bool) -> PhaseStep:
    action = PhaseAction(
        kind=StepKind.MIXED,
        admit_seqs=max(0, view.max_num_seqs - view.running_seqs),
        preempt_prefills=False,
        phase=Phase.MIXED,
        n_seqs=0,
        k_seqs=0,
        fallback=fallback,
    )
    return PhaseStep(action=action, state=PhaseState())


def _enter_eb(view: EngineView, cap: int) -> PhaseState:
    if view.decoding_seqs > 0:
        n_seqs = max(1, min(view.decoding_seqs + view.waiting_seqs, cap))
        return PhaseState(phase=Phase.DECODE, n_seqs=n_seqs, last_n_update_s=view.now_s)
    return PhaseState(phase=Phase.INITIAL_PREFILL, n_seqs=cap, last_n_update_s=view.now_s)


def step(view: EngineView, state: PhaseState | None, policy: EbplusPolicy | None) -> PhaseStep:
    """Advance the EB(k) phase machine by one engine iteration.

    Args:
        view: the engine at this iteration boundary.
        state: the previous step's state, or None at start (MIXED).
        policy: the last EB+ document the engine holds, or None.

    Returns:
        what to schedule now and the state for the next step. A missing or stale policy, or a pushed
        "MB" mode, gives MIXED (mixed batching); ``action.fallback`` tells the two apart.
    """
    return advance(view, state, live_payload(policy, view.now_s))


def runs_phases(payload: EbplusPayload | None) -> bool:
    """True when ``payload`` asks for EB(k)'s phases; MB and the fallback (None) are MIXED from a fresh state.

    The MIXED step reads only the engine's running count, so an engine may test this before it
    counts its decoding requests for ``advance``.
    """
    return payload is not None and payload.mode is EbplusMode.EB


def advance(view: EngineView, state: PhaseState | None, payload: EbplusPayload | None) -> PhaseStep:
    """Advance the phase machine by one iteration under a payload already known to be live.

    ``step`` calls it after the staleness check; an engine that runs a fixed EB(k) without a control
    plane (the benchmark's EB with fixed k) calls it with its own constant payload.

    Args:
        view: the engine at this iteration boundary.
        state: the previous step's state, or None at start (MIXED).
        payload: the live EB+ payload, or None for the fallback (MIXED, ``action.fallback`` set).

    Returns:
        what to schedule now and the state for the next step.
    """
    if payload is None or not runs_phases(payload):
        return _mixed(view, fallback=payload is None)
    theta, cap = payload.theta, max(1, min(payload.n, view.max_num_seqs))
    current = state if state is not None else PhaseState()
    if current.phase is Phase.MIXED:
        current = _enter_eb(view, cap)
    elif current.n_seqs > cap:
        current = current._replace(n_seqs=cap)

    for _ in range(_MAX_TRANSITIONS_PER_STEP):
        if current.phase is Phase.INITIAL_PREFILL:
            if view.decoding_seqs > 0 and not _gate_ok(payload, current.n_seqs, view):
                reserve = kv_gate_fraction(
                    gate=payload.kv_gate, n_seqs=current.n_seqs, mu_o_tokens=payload.mu_o_tokens, view=view
                )
                capacity_tokens = view.kv_total_blocks * view.block_size_tokens * (1.0 - reserve)
                adaptive = math.floor(capacity_tokens / (payload.mu_l_tokens + 0.5 * payload.mu_o_tokens))
                floor_seqs = min(cap, max(_ESCAPE_FLOOR_SEQS, view.max_num_seqs // 10))
                n_seqs = max(floor_seqs, min(adaptive, view.decoding_seqs))
                current = current._replace(phase=Phase.DECODE, n_seqs=n_seqs, last_n_update_s=view.now_s)
                return _action(StepKind.DECODE, current, theta, preempt=view.prefilling_seqs > 0)
            filled = view.decoding_seqs >= current.n_seqs and view.prefilling_seqs == 0
            drained = view.waiting_seqs == 0 and view.prefilling_seqs == 0 and view.decoding_seqs > 0
            if filled or drained:
                current = current._replace(phase=Phase.DECODE)
                continue
            if view.waiting_seqs == 0 and view.running_seqs == 0:
                return _action(StepKind.IDLE, current, theta)
            admit = current.n_seqs - view.decoding_seqs - view.prefilling_seqs
            return _action(StepKind.PREFILL, current, theta, admit=min(admit, view.waiting_seqs))
        if current.phase is Phase.DECODE:
            if view.decoding_seqs == 0:
                if view.waiting_seqs > 0 or view.prefilling_seqs > 0:
                    current = current._replace(phase=Phase.INITIAL_PREFILL, n_seqs=cap, decoding_at_phase_start=0)
                    continue
                return _action(StepKind.IDLE, current, theta)
            recovery_due = (
                current.last_n_update_s is None or view.now_s - current.last_n_update_s >= N_UPDATE_COOLDOWN_S
            )
            if current.n_seqs < cap and 2 * view.waiting_seqs >= view.max_num_seqs and recovery_due:
                current = current._replace(n_seqs=cap, last_n_update_s=view.now_s)
            k_seqs = _k(theta, current.n_seqs)
            fillable = max(0, min(view.waiting_seqs + view.prefilling_seqs, current.n_seqs - view.decoding_seqs))
            ratio_ok = fillable > 0 and fillable * (current.n_seqs - k_seqs) >= view.decoding_seqs * k_seqs
            if ratio_ok and _gate_ok(payload, current.n_seqs, view):
                current = current._replace(
                    phase=Phase.REFILL,
                    refill_target_seqs=fillable,
                    decoding_at_phase_start=view.decoding_seqs,
                )
                continue
            return _action(StepKind.DECODE, current, theta)
        # Phase.REFILL
        prefilled = view.decoding_seqs - current.decoding_at_phase_start
        kv_short = not _gate_ok(payload, current.n_seqs, view)
        done = prefilled >= current.refill_target_seqs
        drained = view.waiting_seqs == 0 and view.prefilling_seqs == 0 and view.decoding_seqs > 0
        full = view.running_seqs >= view.max_num_seqs and view.decoding_seqs > 0
        if done or drained or full or kv_short:
            current = current._replace(phase=Phase.DECODE)
            return _action(StepKind.DECODE, current, theta, preempt=kv_short and view.prefilling_seqs > 0)
        admit = current.refill_target_seqs - prefilled - view.prefilling_seqs
        return _action(StepKind.PREFILL, current, theta, admit=min(admit, view.waiting_seqs))
    return _action(StepKind.DECODE, current, theta)
