"""What every OpenAI response body repeats, and what chunks and whole bodies share: the envelope
(id, object, created, model, choices), the usage object, and completions' echo.

Usage counts come from each choice's last RequestOutput, whose counters are cumulative. With n > 1
choices (each a sample with its own outputs, `RequestOutput.index`) usage counts the prompt once and
the completion tokens of every choice. A batch of prompts (completions) has n choices per prompt,
prompt i's at indices i * n to i * n + n - 1; usage counts each prompt once.

Completions' `echo` puts the prompt's text (and, with logprobs, its logprobs: prompt_logprobs.py)
before the completion's.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from protocol.responses.logprobs import completion_logprobs
from protocol.responses.prompt_logprobs import echo_logprobs, joined
from stages.messages import PromptScores, RequestOutput, TokenLogprob

COMPLETION_OBJECT = "text_completion"
CHAT_OBJECT = "chat.completion"
CHAT_CHUNK_OBJECT = "chat.completion.chunk"


@dataclass(frozen=True, slots=True)
class ResponseMeta:
    """What every body of one response repeats."""

    id: str  # "cmpl-..." or "chatcmpl-..."
    created: int  # Unix seconds
    model: str
    num_prompts: int = 1  # a batch's choices come in groups of n, one group per prompt


@dataclass(frozen=True, slots=True)
class Echo:
    """Completions' echo: the prompt's text, and the logprobs count asked for (None: none)."""

    text: str
    num_top: int | None


def echoed(echo: Echo, text: str, logprobs: list[TokenLogprob] | None, prompt: PromptScores | None,
           text_offset: int = 0) -> tuple[str, dict[str, Any] | None, int]:
    """The echoed prompt before a completion's (first) text and logprobs -> (text, logprobs object,
    the text offset after it)."""
    if echo.num_top is None:
        return echo.text + text, None, text_offset
    body, offset = echo_logprobs(prompt, echo.num_top) if prompt is not None else (None, text_offset)
    rest, offset = completion_logprobs(logprobs or [], offset)
    return echo.text + text, rest if body is None else joined(body, rest), offset


def usage_dict(lasts: Sequence[RequestOutput], num_prompts: int = 1) -> dict[str, Any]:
    """Usage from each choice's last output (in index order, n per prompt). Each prompt is counted
    once; its cached tokens are its first choice's (the other samples share its prompt blocks
    rather than hitting the cache)."""
    firsts = lasts[::len(lasts) // num_prompts]
    num_prompt = sum(out.num_prompt_tokens for out in firsts)
    num_output = sum(out.num_output_tokens for out in lasts)
    return {
        "prompt_tokens": num_prompt,
        "completion_tokens": num_output,
        "total_tokens": num_prompt + num_output,
        "prompt_tokens_details": {"cached_tokens": sum(out.num_cached_tokens for out in firsts)},
    }


def envelope(meta: ResponseMeta, obj: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": meta.id, "object": obj, "created": meta.created, "model": meta.model, "choices": choices}
