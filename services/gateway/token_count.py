"""Prompt tokens as the upstream counts them: vLLM's ``POST /tokenize`` (never a character heuristic).

FleetOpt routes on L_total = prompt tokens + max_tokens (seed 002 section 2.3), and the band and the
compression target are exact token counts, so the count must be the serving model's own. A completions
request is counted with ``{"model", "prompt"}``, a chat request with ``{"model", "messages",
"add_generation_prompt": true}`` (the chat template's tokens count too). A prompt given as token ids is
its length. A batch of string prompts counts as its longest one (the batch goes to one engine).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aiohttp

from schemas.errors import GovernorError
from services.gateway.inbound import ApiKind


class TokenCountError(GovernorError):
    """The upstream could not count the prompt (down, no ``/tokenize``, or an unexpected answer)."""


class TokenCounter:
    """Counts prompts through an upstream's tokenizer endpoint."""

    def __init__(self, session: aiohttp.ClientSession, *, timeout_s: float) -> None:
        self._session = session
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)

    async def count(self, base_url: str, kind: ApiKind, body: Mapping[str, Any]) -> int:
        """Prompt tokens of request ``body`` by the tokenizer of the upstream at ``base_url``.

        Raises:
            TokenCountError: the upstream did not answer with a count.
        """
        model = body["model"]
        if kind == "chat":
            return await self._tokenize(
                base_url, {"model": model, "messages": body["messages"], "add_generation_prompt": True}
            )
        prompt = body["prompt"]
        if isinstance(prompt, str):
            return await self._tokenize(base_url, {"model": model, "prompt": prompt})
        if all(isinstance(p, int) for p in prompt):
            return len(prompt)
        counts = [await self._tokenize(base_url, {"model": model, "prompt": p}) for p in prompt]
        return max(counts)

    async def _tokenize(self, base_url: str, payload: Mapping[str, Any]) -> int:
        try:
            async with self._session.post(f"{base_url}/tokenize", json=payload, timeout=self._timeout) as response:
                if response.status != 200:
                    msg = f"{base_url}/tokenize answered {response.status}"
                    raise TokenCountError(msg)
                answer = await response.json()
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            msg = f"{base_url}/tokenize failed: {exc!r}"
            raise TokenCountError(msg) from exc
        count = answer.get("count") if isinstance(answer, dict) else None
        if not isinstance(count, int) or count < 0:
            msg = f"{base_url}/tokenize answered no count: {str(answer)[:200]}"
            raise TokenCountError(msg)
        return count
