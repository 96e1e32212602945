"""The extractive compressor: sentence split, keep order, and the bisection against a token count."""

from __future__ import annotations

import asyncio

from services.gateway.compressor import compress_to_fit, plan_sentences, sentence_scores, split_sentences


async def _words(text: str) -> int:
    return len(text.split())


class TestPlan:
    def test_split_keeps_whole_sentences(self) -> None:
        assert split_sentences("One two. Three?  Four!\nFive") == ["One two.", "Three?", "Four!", "Five"]

    def test_central_sentences_score_above_digressions(self) -> None:
        sentences = ["The dam holds the river.", "The river floods the dam.", "Cats purr softly."]
        scores = sentence_scores(sentences)
        assert scores[0] > scores[2]
        assert scores[1] > scores[2]

    def test_the_last_then_the_first_sentence_are_kept_first(self) -> None:
        plan = plan_sentences("Intro here. Cats purr. The river and the dam. The river dam. Question about the river?")
        assert plan.priority[:2] == (4, 0)
        assert plan.keep(2) == "Intro here. Question about the river?"
        assert plan.priority[-1] == 1


class TestCompressToFit:
    def test_keeps_the_most_sentences_that_fit_verified_by_the_count(self) -> None:
        text = " ".join(f"Sentence {i} about the river valley dam." for i in range(20))
        result = asyncio.run(compress_to_fit(plan_sentences(text), _words, 40))
        assert result is not None
        assert result.tokens == len(result.text.split()) <= 40
        assert result.sentences_kept == 5
        assert result.sentences_total == 20

    def test_returns_none_when_even_the_last_sentence_is_too_long(self) -> None:
        assert asyncio.run(compress_to_fit(plan_sentences("a b c d e f."), _words, 3)) is None

    def test_returns_none_for_an_empty_text(self) -> None:
        assert asyncio.run(compress_to_fit(plan_sentences("   "), _words, 3)) is None
