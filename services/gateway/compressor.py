"""Extractive prompt compression for FleetOpt's compress-and-route band (seed 002 section 2.3, Eq. 15).

A borderline request (B_short < L_total <= gamma * B_short) in a safe category is cut to T_c = B_short - L_out
prompt tokens and sent to the short pool. The cut keeps whole sentences, never rewrites one:

- the text is split into sentences at ``.``, ``!``, ``?`` or a line break followed by white space;
- the last sentence (where a prompt usually puts its question or instruction) is kept first, the first
  sentence (its framing) second, then the others by score, highest first, ties to the earlier;
- a sentence's score is its term centrality: the mean over its distinct content words (three letters or
  more, not a stop word) of log(1 + the word's count in the whole text). A sentence that repeats what the
  text is about scores high; boilerplate and digressions score low;
- the kept sentences are joined in their original order.

How many to keep is found by bisection on the number kept, each candidate counted by the upstream's own
tokenizer (the ``count`` callable): the result is the longest prefix of the priority order whose whole
request fits ``target_tokens``, verified by that count. When even the last sentence alone does not fit, the
compression fails and the request goes to the long pool. It costs about log2(sentences) + 1 calls of
``/tokenize``; what it saves on a real text is measured by ops/bench/bench_gateway.py (docs/gateway.md).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n\s*")
_WORD = re.compile(r"[a-z][a-z0-9']{2,}")
_STOP_WORD_TEXT = (
    "the and for are but not you all any can had her was one our out has his how its may new now old see two "
    "who did get let put say she too use that with have this will your from they been were said each which "
    "their what there when would about into than them then these some could other more very just also only "
    "over such because does most must should where while those being"
)
_STOP_WORDS = frozenset(_STOP_WORD_TEXT.split())


@dataclass(frozen=True, slots=True, kw_only=True)
class SentencePlan:
    """A text split into sentences, and the order in which they are kept.

    Attributes:
        sentences: the sentences in text order, each without its trailing separator.
        priority: sentence indices, the first kept first.
    """

    sentences: tuple[str, ...]
    priority: tuple[int, ...]

    def keep(self, count: int) -> str:
        """The text made of the first ``count`` sentences of the priority order, in text order."""
        kept = sorted(self.priority[:count])
        return " ".join(self.sentences[i] for i in kept)


@dataclass(frozen=True, slots=True, kw_only=True)
class Compression:
    """A successful cut.

    Attributes:
        text: the compressed text.
        tokens: the whole request's prompt tokens with ``text`` in place, by the upstream's count.
        sentences_total: sentences in the original text.
        sentences_kept: sentences in ``text``.
    """

    text: str
    tokens: int
    sentences_total: int
    sentences_kept: int


def split_sentences(text: str) -> list[str]:
    """The non-empty sentences of ``text``, stripped."""
    return [part.strip() for part in _SENTENCE_END.split(text) if part.strip()]


def sentence_scores(sentences: list[str]) -> list[float]:
    """Term centrality of each sentence: mean log(1 + text count) over its distinct content words."""
    words = [{w for w in _WORD.findall(s.lower()) if w not in _STOP_WORDS} for s in sentences]
    counts = Counter(w for s in sentences for w in _WORD.findall(s.lower()) if w not in _STOP_WORDS)
    return [sum(math.log1p(counts[w]) for w in ws) / len(ws) if ws else 0.0 for ws in words]


def plan_sentences(text: str) -> SentencePlan:
    """Split ``text`` and order its sentences for keeping (last, first, then by score)."""
    sentences = split_sentences(text)
    if not sentences:
        return SentencePlan(sentences=(), priority=())
    scores = sentence_scores(sentences)
    last = len(sentences) - 1
    head = [last] if last == 0 else [last, 0]
    rest = sorted(range(1, last), key=lambda i: (-scores[i], i))
    return SentencePlan(sentences=tuple(sentences), priority=(*head, *rest))


async def compress_to_fit(
    plan: SentencePlan, count: Callable[[str], Awaitable[int]], target_tokens: int
) -> Compression | None:
    """Keep as many sentences as fit ``target_tokens`` by ``count`` (the upstream's tokenizer); None if none fit.

    Args:
        plan: the text's sentences and keep order.
        count: prompt tokens of the whole request with the given text in place of the original.
        target_tokens: T_c, the most prompt tokens the compressed request may have.
    """
    total = len(plan.sentences)
    if total == 0:
        return None
    low_tokens = await count(plan.keep(1))
    if low_tokens > target_tokens:
        return None
    low, high = 1, total  # keep(low) fits; keep(high + 1) is past the end
    best = low_tokens
    while low < high:
        middle = (low + high + 1) // 2
        tokens = await count(plan.keep(middle))
        if tokens <= target_tokens:
            low, best = middle, tokens
        else:
            high = middle - 1
    return Compression(text=plan.keep(low), tokens=best, sentences_total=total, sentences_kept=low)
