"""EB(k) and EB+ schedulers for the simulator, on the pure phase machine (specs/seed-001-ebplus.md section 3.4).

Each iteration the scheduler reduces the engine to the phase machine's counts
(``policies.ebplus.phase_machine``: waiting, decoding, prefilling, free KV blocks), advances the
machine (phase 0 initial prefill, phase 1 decode until k slots are idle and the Eq. 23 KV gate passes,
phase 2 refill) and turns its action into a ``BatchPlan``:

- DECODE: every prefill-complete running request decodes one token; no prefill. Priced by the
  exclusive decode formula alpha_d + beta_d n (``BatchPlan.exclusive``).
- PREFILL: partial prefills first, then up to ``admit_seqs`` new requests FCFS, in chunks under the
  token budget and the free KV; no decode. Priced alpha_p + beta_p tokens.
- MIXED: vLLM v1 mixed batching (``pack_decode_first``), priced by the mixed formula, under the
  document's MB step budget when it sets one (``mb_token_budget_tokens``, EB+'s TBT guard).

``EbplusScheduler`` obeys the engine's EB+ document (mode, theta, N, KV gate, mean lengths, MB budget) read from
``view.policy`` and falls back to mixed batching while the document is missing or past its
``valid_until`` (DESIGN principle 5; spec section 8 P12). ``FixedEbScheduler`` is EB(k) with a
constant theta and N and no control plane: the benchmark's "EB with fixed k".

Deviation: when the free KV cannot take a single prefill chunk the phase machine asked for, the step
decodes instead of idling (the reference engine would wait for its KV gate); an empty plan would park
the simulated engine until the next arrival.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from policies.ebplus import EngineView as PhaseView
from policies.ebplus import PhaseState, PhaseStep, StepKind, advance, live_payload
from schemas.errors import InvalidInputError
from schemas.policy_docs.ebplus import EbplusFallback, EbplusMode, EbplusPayload, EbplusPolicy, KvGate
from services.sim.request import SimRequest
from services.sim.schedulers.base import BatchPlan, EngineView
from services.sim.schedulers.packing import pack_decode_first, pack_decodes, pack_prefills


def phase_view(view: EngineView) -> PhaseView:
    """The phase machine's counts of a simulated engine at this iteration boundary."""
    decoding = sum(1 for request in view.running if request.prefill_done)
    return PhaseView(
        now_s=view.now_s,
        waiting_seqs=len(view.waiting),
        decoding_seqs=decoding,
        prefilling_seqs=len(view.running) - decoding,
        kv_free_blocks=view.kv_blocks_free,
        kv_total_blocks=view.kv_blocks_total,
        block_size_tokens=view.block_size_tokens,
        max_num_seqs=view.max_num_seqs,
    )


def decode_plan(view: EngineView, *, preempt_prefills: bool) -> BatchPlan:
    """A pure decode batch: every prefill-complete request, newest preempted when a block is missing.

    Args:
        view: the engine's state.
        preempt_prefills: drop in-progress chunked prefills back to the queue first (KV escape).
    """
    bs = view.block_size_tokens
    free = view.kv_blocks_free
    preempted: list[SimRequest] = []
    candidates: list[SimRequest] = []
    for request in view.running:
        if preempt_prefills and not request.prefill_done:
            preempted.append(request)
            free += request.kv_blocks
        else:
            candidates.append(request)
    packed = pack_decodes(candidates, free_blocks=free, budget_tokens=view.token_budget_tokens, block_size_tokens=bs)
    preempted.extend(packed.preempted)
    decodes = packed.decodes
    return BatchPlan(decodes=tuple(decodes), preempted=tuple(preempted), mode=EbplusMode.EB, exclusive=True)


def prefill_plan(view: EngineView, *, admit_seqs: int) -> BatchPlan:
    """A pure prefill batch: partial prefills, then up to ``admit_seqs`` admissions FCFS, in chunks.

    Chunks fill the token budget; a chunk whose KV blocks do not fit is skipped (running) or stops
    the admissions (waiting), so FCFS order holds (``pack_prefills``).
    """
    prefills = pack_prefills(
        view.running,
        view.waiting,
        free_blocks=view.kv_blocks_free,
        budget_tokens=view.token_budget_tokens,
        admit_seqs=min(admit_seqs, view.max_num_seqs - len(view.running)),
        block_size_tokens=view.block_size_tokens,
    )
    return BatchPlan(prefills=tuple(prefills), mode=EbplusMode.EB, exclusive=True)


def plan_for(view: EngineView, step: PhaseStep, *, mb_budget_tokens: int | None = None) -> BatchPlan:
    """Turn one phase-machine step into the engine's batch (MIXED steps under ``mb_budget_tokens``, if set)."""
    action = step.action
    if action.kind is StepKind.MIXED:
        return pack_decode_first(view, mode=EbplusMode.MB, budget_tokens=mb_budget_tokens)
    if action.kind is StepKind.IDLE:
        return BatchPlan(mode=EbplusMode.EB, exclusive=True)
    if action.kind is StepKind.PREFILL:
        plan = prefill_plan(view, admit_seqs=action.admit_seqs)
        if not plan.empty:
            return plan
    return decode_plan(view, preempt_prefills=action.preempt_prefills)


@dataclass(slots=True)
class EbplusScheduler:
    """The EB+ engine side: the EB(k) phase machine under the pushed EB+ document, MB otherwise.

    Attributes:
        state: the phase machine's state between iterations (engine-local).
        fallback_steps: iterations run as mixed batching because the document was missing or stale.
        eb_steps: iterations run as exclusive (EB) batches.
    """

    state: PhaseState | None = None
    fallback_steps: int = 0
    eb_steps: int = 0

    @property
    def policy_kind(self) -> str | None:
        """The engine fetches its ``ebplus`` document (scope: its engine id)."""
        return "ebplus"

    def schedule(self, view: EngineView) -> BatchPlan:
        """Advance the phase machine under the live EB+ payload (mixed batching without one)."""
        policy = view.policy if isinstance(view.policy, EbplusPolicy) else None
        payload = live_payload(policy, view.now_s)
        step = advance(phase_view(view), self.state, payload)
        self.state = step.state
        if step.action.fallback:
            self.fallback_steps += 1
        plan = plan_for(view, step, mb_budget_tokens=None if payload is None else payload.mb_token_budget_tokens)
        if plan.exclusive:
            self.eb_steps += 1
        return plan


@dataclass(slots=True, kw_only=True)
class FixedEbScheduler:
    """EB(k) with a constant threshold and batch size, without a control plane (the fixed-k baseline).

    Attributes:
        theta: k / N, in (0, 1).
        n_seqs: N, sequences (capped by the engine's max_num_seqs).
        mu_l_tokens: mean prompt length for the KV escape, tokens.
        mu_o_tokens: mean output length for the Eq. 23 KV gate, tokens.
        kv_gate: Eq. 23 parameters (paper defaults).
        state: the phase machine's state between iterations.

    Raises:
        InvalidInputError: theta outside (0, 1), N < 1 or a non-positive mean (via the payload model).
    """

    theta: float
    n_seqs: int
    mu_l_tokens: float
    mu_o_tokens: float
    kv_gate: KvGate = field(default_factory=KvGate)
    state: PhaseState | None = None
    _payload: EbplusPayload = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not 0.0 < self.theta < 1.0 or self.n_seqs < 1:
            msg = f"FixedEbScheduler needs 0 < theta < 1 and n_seqs >= 1, got theta={self.theta}, n={self.n_seqs}"
            raise InvalidInputError(msg, field="theta", value=(self.theta, self.n_seqs))
        self._payload = EbplusPayload(
            mode=EbplusMode.EB,
            theta=self.theta,
            k=max(1, int(self.theta * self.n_seqs)),
            n=self.n_seqs,
            kv_gate=self.kv_gate,
            mu_l_tokens=self.mu_l_tokens,
            mu_o_tokens=self.mu_o_tokens,
            calib_id="fixed",
            fallback=EbplusFallback(n=self.n_seqs),
        )

    @property
    def policy_kind(self) -> str | None:
        """The fixed variant obeys no policy."""
        return None

    def schedule(self, view: EngineView) -> BatchPlan:
        """Advance the phase machine under the constant payload."""
        step = advance(phase_view(view), self.state, self._payload)
        self.state = step.state
        return plan_for(view, step)
