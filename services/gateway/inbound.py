"""The gateway's edge: an OpenAI request body checked once, before anything is routed or forwarded.

A body that is not a JSON object, names no model, has a ``max_tokens`` that is not a positive integer, a
``stream`` that is not a boolean, or lacks its prompt (``prompt`` for completions, ``messages`` for chat)
is refused with ``BadRequestError`` and never reaches an upstream. Everything else in the body is the
upstream's business and is forwarded unchanged: the gateway reads only the fields it routes on.

The request id is the client's ``x-request-id`` when it is a valid ``Label`` of the event contract (letters,
digits and ``_ . : / @ -``), else a fresh one; the tier and the traffic category come from ``x-governor-tier``
and ``x-governor-category`` (headers, so the body the engine sees is the client's own) and must be labels too,
as the request events (schemas/requests.py) and the gateway's own events carry them. A client that knows how
long the answer will be (a predictor's estimate, or a ``max_tokens`` it knows to be tight) says so in
``x-governor-output-tokens``: a positive integer, capped at ``max_tokens``, that BF-IO's lookahead uses for
the request instead of the survival estimate (``output_tokens_hint``, specs/seed-003-bfio.md 6.2).
"""

from __future__ import annotations

import itertools
import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, NoReturn

from schemas.envelope import LABEL_PATTERN, MAX_ID_CHARS
from schemas.errors import InvalidInputError

ApiKind = Literal["completions", "chat"]

REQUEST_ID_HEADER = "x-request-id"
TIER_HEADER = "x-governor-tier"
CATEGORY_HEADER = "x-governor-category"
OUTPUT_HINT_HEADER = "x-governor-output-tokens"
MAX_OUTPUT_HINT = 10_000_000  # the contract's bound on output_tokens_hint (schemas/policy_docs/bfio.py)
DEFAULT_TIER = "default"
_LABEL = re.compile(LABEL_PATTERN)


class BadRequestError(InvalidInputError):
    """A client request the gateway refuses with 400; ``error_code`` is the OpenAI-style error code."""

    def __init__(self, message: str, *, field: str, error_code: str) -> None:
        super().__init__(message, field=field)
        self.error_code = error_code


@dataclass(frozen=True, slots=True, kw_only=True)
class InboundRequest:
    """A checked client request.

    Attributes:
        kind: which endpoint it came to.
        body: the JSON object as the client sent it; forwarded as is unless FleetOpt compresses its prompt.
        model: the model it names.
        stream: whether it asks for server-sent events.
        max_tokens: ``max_tokens`` (or chat's ``max_completion_tokens``), None when absent.
        request_id: the id it is known by in logs, events and the ``x-request-id`` response header.
        tier: its tier (paying tiers are served first from a queue).
        category: its traffic category, None when the client named none (never compressed).
        output_tokens_hint: the output length the client predicts, None when it gave none.
    """

    kind: ApiKind
    body: dict[str, Any]
    model: str
    stream: bool
    max_tokens: int | None
    request_id: str
    tier: str
    category: str | None
    output_tokens_hint: int | None = None


class RequestIds:
    """Request ids: the client's ``x-request-id`` when it is a valid label, else ``gw-<process>-<n>``.

    The process part is random once per gateway start and ``n`` counts up, so ids are unique across restarts
    without a random draw per request (a ``uuid4`` each showed in the gateway's profile).
    """

    def __init__(self) -> None:
        self._prefix = f"gw-{uuid.uuid4().hex[:12]}-"
        self._count = itertools.count()

    def of(self, headers: Mapping[str, str]) -> str:
        """The id of the request with ``headers``."""
        given = headers.get(REQUEST_ID_HEADER)
        if given is not None and _is_label(given):
            return given
        return f"{self._prefix}{next(self._count)}"


def _is_label(value: str) -> bool:
    """Whether ``value`` is a ``Label`` of the event contract (events carry ids, tiers and categories as labels).

    The pattern and length of ``schemas.envelope.Label``, checked without building a pydantic validator call.
    """
    return len(value) <= MAX_ID_CHARS and _LABEL.fullmatch(value) is not None


def parse_inbound(raw: bytes, kind: ApiKind, headers: Mapping[str, str], request_id: str) -> InboundRequest:
    """Check one request body and its headers.

    Raises:
        BadRequestError: the body or a header is invalid; the message names the field and the reason.
    """
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        _refuse(f"the body is not valid JSON: {exc}", "body", "invalid_json")
    if not isinstance(body, dict):
        _refuse(f"the body must be a JSON object, got {type(body).__name__}", "body", "invalid_json")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        _refuse("model is required and must be a non-empty string", "model", "missing_model")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        _refuse(f"stream must be a boolean, got {stream!r}", "stream", "invalid_value")
    max_tokens = _max_tokens(body, kind)
    if kind == "completions":
        _check_prompt(body.get("prompt"))
    else:
        _check_messages(body.get("messages"))
    tier = headers.get(TIER_HEADER, DEFAULT_TIER)
    category = headers.get(CATEGORY_HEADER)
    for name, value in ((TIER_HEADER, tier), (CATEGORY_HEADER, category)):
        if value is not None and not _is_label(value):
            _refuse(f"{name} must be a label (letters, digits, _ . : / @ -), got {value!r}", name, "invalid_value")
    return InboundRequest(
        kind=kind,
        body=body,
        model=model,
        stream=stream,
        max_tokens=max_tokens,
        request_id=request_id,
        tier=tier,
        category=category,
        output_tokens_hint=_output_hint(headers.get(OUTPUT_HINT_HEADER), max_tokens),
    )


def _output_hint(value: str | None, max_tokens: int | None) -> int | None:
    """The client's predicted output tokens, capped at ``max_tokens`` (no answer is longer)."""
    if value is None:
        return None
    if not value.isascii() or not value.isdigit() or not 1 <= int(value) <= MAX_OUTPUT_HINT:
        msg = f"{OUTPUT_HINT_HEADER} must be an integer from 1 to {MAX_OUTPUT_HINT}, got {value!r}"
        _refuse(msg, OUTPUT_HINT_HEADER, "invalid_value")
    hint = int(value)
    return hint if max_tokens is None else min(hint, max_tokens)


def _max_tokens(body: dict[str, Any], kind: ApiKind) -> int | None:
    names = ("max_tokens", "max_completion_tokens") if kind == "chat" else ("max_tokens",)
    found: int | None = None
    for name in names:
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            _refuse(f"{name} must be a positive integer, got {value!r}", name, "invalid_value")
        found = value if found is None else min(found, value)
    return found


def _check_prompt(prompt: object) -> None:
    if isinstance(prompt, str):
        return
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) for p in prompt):
            return
        if all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in prompt):
            return
    _refuse("prompt is required: a string, a list of strings or a list of token ids", "prompt", "invalid_value")


def _check_messages(messages: object) -> None:
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        _refuse("messages is required: a non-empty list of message objects", "messages", "invalid_value")


def _refuse(message: str, field: str, error_code: str) -> NoReturn:
    raise BadRequestError(message, field=field, error_code=error_code)
