"""Logprobs in the two OpenAI shapes, built from the emitter's TokenLogprob records.

Completions (legacy): one object of parallel lists,
    {"tokens": [str], "token_logprobs": [float], "top_logprobs": [{token: logprob}], "text_offset": [int]}
where each top_logprobs dict holds the k alternatives plus the sampled token (OpenAI: "up to
logprobs+1 elements"), and text_offset is each token's character offset in the completion,
counted over the token strings (as vLLM does), so it continues across stream chunks.

Chat: {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}
where top_logprobs holds exactly the k alternatives asked for by `top_logprobs`.

`bytes` is the UTF-8 of the token string. For a token that is part of a multi-byte character the
string already holds U+FFFD (TokenLogprob carries text, not bytes), so those bytes are U+FFFD's,
which is also what vLLM reports.

JSON has no -inf: a logprob of -inf (a masked token) is clamped to -9999.0, like vLLM.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

from stages.messages import TokenLogprob

MIN_LOGPROB = -9999.0


def clamp_logprob(logprob: float) -> float:
    if math.isnan(logprob):
        return MIN_LOGPROB
    return logprob if logprob > MIN_LOGPROB else MIN_LOGPROB


def completion_logprobs(
    logprobs: Sequence[TokenLogprob], text_offset: int = 0
) -> tuple[dict[str, Any], int]:
    """The completions logprobs object for these tokens, and the text offset after them."""
    tokens: list[str] = []
    token_logprobs: list[float] = []
    top_logprobs: list[dict[str, float]] = []
    offsets: list[int] = []
    for lp in logprobs:
        tokens.append(lp.token)
        token_logprobs.append(clamp_logprob(lp.logprob))
        top = {text: clamp_logprob(value) for text, _id, value in lp.top}
        # The sampled token is always listed; when it is among the top k its entry is already there.
        top.setdefault(lp.token, clamp_logprob(lp.logprob))
        top_logprobs.append(top)
        offsets.append(text_offset)
        text_offset += len(lp.token)
    body = {
        "tokens": tokens,
        "token_logprobs": token_logprobs,
        "top_logprobs": top_logprobs,
        "text_offset": offsets,
    }
    return body, text_offset


def _utf8_list(text: str) -> list[int]:
    return list(text.encode("utf-8", errors="replace"))


def chat_logprobs(logprobs: Sequence[TokenLogprob]) -> dict[str, Any]:
    """The chat logprobs object: {"content": [...]} for these tokens."""
    content = [
        {
            "token": lp.token,
            "logprob": clamp_logprob(lp.logprob),
            "bytes": _utf8_list(lp.token),
            "top_logprobs": [
                {"token": text, "logprob": clamp_logprob(value), "bytes": _utf8_list(text)}
                for text, _id, value in lp.top
            ],
        }
        for lp in logprobs
    ]
    return {"content": content}
