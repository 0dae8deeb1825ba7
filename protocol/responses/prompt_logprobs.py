"""Prompt logprobs in vLLM's two shapes, from the emitter's PromptScores.

`prompt_logprobs` (vLLM's extension; completions: on each choice; chat: on the body): one entry per
prompt token, None for the first (nothing comes before it), then for each position a dict keyed by
token id (a string, as JSON keys are) of {"logprob", "rank", "decoded_token"}: the prompt token
itself first, with its rank, then the k most likely tokens there, ranked 1..k (an entry already
present, the prompt token among them, is not repeated).

`echo` with `logprobs` on completions: the prompt's positions in the legacy completions logprobs
object before the completion's (logprobs.completion_logprobs): the first prompt token with
null token_logprobs and top_logprobs, then each token's logprob and a top_logprobs dict of the token
itself and up to `logprobs` alternatives (vLLM's "logprobs + 1" entries), text offsets counted over
the token strings from 0 and continuing into the completion.
"""
from __future__ import annotations

from typing import Any

from protocol.responses.logprobs import clamp_logprob
from stages.messages import PromptScores


def vllm_prompt_logprobs(scores: PromptScores) -> list[dict[str, dict[str, Any]] | None]:
    out: list[dict[str, dict[str, Any]] | None] = [None]
    for lp in scores.positions:
        entry = {str(lp.token_id): {"logprob": clamp_logprob(lp.logprob), "rank": lp.rank, "decoded_token": lp.token}}
        for rank, (text, token_id, value) in enumerate(lp.top, start=1):
            entry.setdefault(str(token_id), {"logprob": clamp_logprob(value), "rank": rank, "decoded_token": text})
        out.append(entry)
    return out


def echo_logprobs(scores: PromptScores, num_top: int) -> tuple[dict[str, list], int]:
    """The prompt's section of a completions logprobs object, and the text offset after it."""
    tokens: list[str] = [scores.first_token]
    token_logprobs: list[float | None] = [None]
    top_logprobs: list[dict[str, float] | None] = [None]
    offsets = [0]
    offset = len(scores.first_token)
    for lp in scores.positions:
        tokens.append(lp.token)
        token_logprobs.append(clamp_logprob(lp.logprob))
        top = {lp.token: clamp_logprob(lp.logprob)}
        for text, _id, value in lp.top[:num_top]:
            top.setdefault(text, clamp_logprob(value))
        top_logprobs.append(top)
        offsets.append(offset)
        offset += len(lp.token)
    body = {"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": top_logprobs, "text_offset": offsets}
    return body, offset


def joined(first: dict[str, list], then: dict[str, list]) -> dict[str, list]:
    """Two sections of a completions logprobs object, one after the other."""
    return {key: first[key] + then[key] for key in first}
