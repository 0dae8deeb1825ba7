"""POST /v1/completions, declared once: the body as a typed CompletionRequest (or a 400 naming the
field) and, from the same fields, its JSON Schema.

`echo` puts the prompt before the completion; with `logprobs` it asks for the prompt's logprobs
too, with as many alternatives (vLLM's rule), unless `prompt_logprobs` says otherwise.
"""
from __future__ import annotations

from dataclasses import dataclass

from protocol.limits import IngressLimits
from protocol.requests.common import COMPLETION_UNSUPPORTED, MaxTokens, common_fields, common_values
from protocol.requests.fields import CALL, Bool, Context, Derived, Int, Schema, Seen
from protocol.requests.logit_fields import PromptLogprobs, max_logprobs
from protocol.requests.prompt import Prompt
from protocol.requests.sampling import EFFECTIVE_MAX_TOKENS, SAMPLING_FIELDS, sampling_params
from protocol.requests.spec import RequestSpec
from stages.sampling import SamplingParams

DEFAULT_MAX_TOKENS = 16  # OpenAI's default for completions


@dataclass(frozen=True, slots=True)
class CompletionRequest:
    model: str | None
    prompts: list[str | list[int]]  # one or more (a batch): texts, or token ids checked against the vocabulary
    params: SamplingParams  # max_tokens == self.max_tokens; the caller still checks the window
    max_tokens: int | None  # never None here (defaults to 16); typed like the chat request's
    stream: bool
    include_usage: bool
    priority: int = 0
    cache_salt: str | None = None
    return_timings: bool = False  # the reply carries this request's stage timings
    n: int = 1  # choices: parallel samples of each prompt
    echo: bool = False  # the prompt's text (and, with logprobs, its logprobs) before the completion

    @property
    def prompt(self) -> str | list[int]:
        """The first prompt (the only one, unless a batch)."""
        return self.prompts[0]


def default_max_tokens(limits: IngressLimits) -> int:
    return DEFAULT_MAX_TOKENS if limits.max_tokens_cap is None else min(DEFAULT_MAX_TOKENS, limits.max_tokens_cap)


@dataclass(frozen=True)
class CompletionMaxTokens(MaxTokens):
    """max_tokens, OpenAI's default of 16 (at most the cap) when absent: min_tokens may not exceed it."""

    key: str = "max_tokens"
    doc_tail: str = f" Default {DEFAULT_MAX_TOKENS}."
    absent = CALL  # the default depends on the limits

    def parse(self, obj: dict, ctx: Context, seen: Seen) -> int:
        max_tokens = super().parse(obj, ctx, seen)
        return default_max_tokens(ctx.limits) if max_tokens is None else max_tokens

    def rules(self, ctx: Context) -> list[Schema]:
        return [{"if": {"properties": {"max_tokens": {"type": "null"}}},
                 "then": {"properties": {"min_tokens": {"maximum": default_max_tokens(ctx.limits)}}}}]


def _build(seen: Seen) -> CompletionRequest:
    logprobs, prompt_logprobs = seen["logprobs"], seen["prompt_logprobs"]
    if prompt_logprobs is None and seen["echo"]:
        prompt_logprobs = logprobs
    return CompletionRequest(
        prompts=seen["prompt"],
        params=sampling_params(seen, logprobs, prompt_logprobs),
        max_tokens=seen["max_tokens"],
        echo=seen["echo"],
        **common_values(seen),
    )


COMPLETION = RequestSpec((
    *common_fields(COMPLETION_UNSUPPORTED),
    CompletionMaxTokens(),
    Derived(EFFECTIVE_MAX_TOKENS, lambda seen: seen["max_tokens"]),
    Int("logprobs", None, 0, max_logprobs, doc="Alternatives to report per position."),
    Bool("echo", False, "The prompt's text (and with logprobs, its logprobs) before the completion; streamed: "
                        "in each choice's first chunk."),
    PromptLogprobs(),
    *SAMPLING_FIELDS,
    Prompt(),
), _build)


def parse_completion_request(obj: dict, limits: IngressLimits, vocab_size: int) -> CompletionRequest:
    return COMPLETION.parse(obj, limits, vocab_size)
