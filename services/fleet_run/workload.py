"""The seeded workload of ``governor fleet up``: text prompts the tiny model's word-level tokenizer reads.

Prompts are runs of whole sentences (so the gateway's extractive compressor has sentences to keep or drop)
drawn from one short text whose words are all in the tokenizer's vocabulary, so a prompt's word count is its
token count up to punctuation. Outputs are 70% short and 30% long (``ignore_eos``), so the ranks' loads differ
as in BF-IO's setting. Short ones have a fixed length (``max_tokens``); long ones carry ``stop_token_ids`` (given
by the caller: words the random model emits at random) and end at the first of them, capped at ``max_tokens``,
so they finish with reason ``stop`` at random lengths, as a real model's answers do. Without such natural
ends every finish is ``length``, which the estimators count as censored (the engine cut the output short):
EB+'s output-length hazard then has no event to fit and EB+ never decides. Half the requests name a category
the FleetOpt plan may compress (``rag``), the rest name none and are never altered. Both runs of a comparison
send the same list.

``burst`` is the overload phase: short requests (one to three sentences, 8 to 24 output tokens, no category)
sent faster than the short pool's one server finishes them, so FleetOpt routes them all to it, its queue
grows, and the admission policy, deciding from its telemetry, marks it busy then overloaded.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

SENTENCES: tuple[str, ...] = (
    "The river flooded the valley in spring.",
    "Farmers in the valley lost their crops to the river.",
    "A festival was held in the town last year.",
    "Engineers said a dam on the river would help the valley.",
    "The dam would keep the spring flood away from valley farms.",
    "Some people liked the market.",
    "The council talked about the river dam for many months.",
    "Tourists came to the market in the town.",
    "Rain records show the river floods the valley often.",
    "A choir sang at the new library.",
    "Some said the dam costs too much for the valley.",
)
QUESTION = "Should the council build the dam on the river?"
FloatArray = npt.NDArray[np.float64]
SAFE_CATEGORY = "rag"  # in FleetOpt's safe categories (policies/fleetopt/params.py)
LONG_FRACTION = 0.3


@dataclass(frozen=True, slots=True, kw_only=True)
class PlannedRequest:
    """One request of the workload: when it is sent (seconds from the run's start) and what it asks."""

    index: int
    at_s: float
    prompt: str
    max_tokens: int
    category: str | None
    stop_token_ids: tuple[int, ...] = ()

    @property
    def prompt_words(self) -> int:
        """The prompt's length in words: its token count under the word-level tokenizer, punctuation aside."""
        return len(self.prompt.split())


def _poisson_arrivals(seed: int, requests: int, rate_per_s: float) -> tuple[np.random.Generator, FloatArray]:
    """The seeded generator and ``requests`` Poisson arrival times at ``rate_per_s`` drawn from it first.

    Raises:
        ValueError: ``requests`` is not positive or ``rate_per_s`` is not positive.
    """
    if requests <= 0 or rate_per_s <= 0:
        msg = f"requests ({requests}) and rate ({rate_per_s}) must be positive"
        raise ValueError(msg)
    rng = np.random.default_rng(seed)
    return rng, np.cumsum(rng.exponential(1.0 / rate_per_s, size=requests))


def workload(seed: int, requests: int, rate_per_s: float, stop_token_ids: tuple[int, ...] = ()) -> list[PlannedRequest]:
    """``requests`` requests with Poisson arrivals at ``rate_per_s``, the same list for the same arguments.

    ``stop_token_ids`` go with the long requests (none: every output has its ``max_tokens``).

    Raises:
        ValueError: ``requests`` is not positive or ``rate_per_s`` is not positive.
    """
    rng, arrivals = _poisson_arrivals(seed, requests, rate_per_s)
    planned = []
    for index, at_s in enumerate(arrivals):
        count = int(rng.integers(2, 2 * len(SENTENCES) + 1))
        body = [SENTENCES[int(i)] for i in rng.integers(0, len(SENTENCES), size=count)]
        long = bool(rng.random() < LONG_FRACTION)
        max_tokens = int(rng.integers(96, 193)) if long else int(rng.integers(8, 33))
        category = SAFE_CATEGORY if rng.random() < 0.5 else None
        planned.append(
            PlannedRequest(
                index=index,
                at_s=float(at_s),
                prompt=" ".join([*body, QUESTION]),
                max_tokens=max_tokens,
                category=category,
                stop_token_ids=stop_token_ids if long else (),
            )
        )
    return planned


BURST_MAX_SENTENCES = 3


def burst(seed: int, requests: int, rate_per_s: float) -> list[PlannedRequest]:
    """``requests`` short requests with Poisson arrivals at ``rate_per_s``: the overload phase's list.

    Each has one to ``BURST_MAX_SENTENCES`` sentences and the question (under 50 tokens) and 8 to 24 output
    tokens, so its L_total (under 75) is below the short-pool bounds FleetOpt planned for the main workload.

    Raises:
        ValueError: ``requests`` is not positive or ``rate_per_s`` is not positive.
    """
    rng, arrivals = _poisson_arrivals(seed, requests, rate_per_s)
    planned = []
    for index, at_s in enumerate(arrivals):
        count = int(rng.integers(1, BURST_MAX_SENTENCES + 1))
        body = [SENTENCES[int(i)] for i in rng.integers(0, len(SENTENCES), size=count)]
        planned.append(
            PlannedRequest(
                index=index,
                at_s=float(at_s),
                prompt=" ".join([*body, QUESTION]),
                max_tokens=int(rng.integers(8, 25)),
                category=None,
            )
        )
    return planned
