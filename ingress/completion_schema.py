"""POST /v1/completions: the body as a typed CompletionRequest, or a 400 naming the field.

`prompt` is a text, an array of token ids, or a batch of those (an array of texts, or an array of
arrays of ids): at most `max_batch_prompts` prompts, and at most `max_prompt_chars` characters (or
ids) in all, so that a batch costs what one long prompt may cost.
"""
from __future__ import annotations

from dataclasses import dataclass

from ingress.common_fields import COMMON_UNSUPPORTED, parse_common
from ingress.errors import bad_request
from ingress.field_checks import check_token_ids, opt_bool, type_error
from ingress.limits import IngressLimits
from ingress.logit_fields import parse_prompt_logprobs
from ingress.sampling_fields import parse_logprobs_count, parse_max_tokens, parse_sampling
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
    n: int = 1  # choices: parallel samples of each prompt
    echo: bool = False  # the prompt's text (and, with logprobs, its logprobs) before the completion

    @property
    def prompt(self) -> str | list[int]:
        """The first prompt (the only one, unless a batch)."""
        return self.prompts[0]


def parse_completion_request(obj: dict, limits: IngressLimits, vocab_size: int) -> CompletionRequest:
    common = parse_common(obj, limits, COMMON_UNSUPPORTED)
    max_tokens = parse_max_tokens(obj, "max_tokens", limits)
    if max_tokens is None:
        max_tokens = DEFAULT_MAX_TOKENS
        if limits.max_tokens_cap is not None:
            max_tokens = min(max_tokens, limits.max_tokens_cap)
    logprobs = parse_logprobs_count(obj, "logprobs", limits)
    echo = opt_bool(obj, "echo", False)
    # vLLM: echo with logprobs asks for the prompt's logprobs too, with as many alternatives.
    prompt_logprobs = parse_prompt_logprobs(obj, limits, common.stream)
    if prompt_logprobs is None and echo:
        prompt_logprobs = logprobs
    params = parse_sampling(obj, limits, vocab_size, max_tokens, logprobs, prompt_logprobs)
    prompts = parse_prompts(obj.get("prompt"), limits, vocab_size)
    return CompletionRequest(
        model=common.model,
        prompts=prompts,
        params=params,
        max_tokens=max_tokens,
        stream=common.stream,
        include_usage=common.include_usage,
        priority=common.priority,
        cache_salt=common.cache_salt,
        n=common.n,
        echo=echo,
    )


def parse_prompts(value: object, limits: IngressLimits, vocab_size: int) -> list[str | list[int]]:
    """A string or an array of token ids (one prompt), or a batch: an array of strings or an array
    of arrays of token ids (not both kinds in one batch, as in OpenAI's and vLLM's schemas)."""
    if value is None:
        raise bad_request("'prompt' is required.", "prompt")
    if type(value) is str:
        return [_check_text(value, "prompt", limits.max_prompt_chars)]
    if type(value) is not list:
        raise type_error("prompt", "a string or an array of token ids", value)
    if not value:
        raise bad_request("'prompt' must not be empty.", "prompt")
    first = value[0]
    if type(first) is int:
        return [_check_ids(value, "prompt", limits.max_prompt_chars, vocab_size)]
    if type(first) is not str and type(first) is not list:
        raise type_error("prompt[0]", "a string, a token id or an array of token ids", first)
    if len(value) > limits.max_batch_prompts:  # before looking at any of them
        raise bad_request(f"'prompt' holds {len(value)} prompts; this server allows at most "
                          f"{limits.max_batch_prompts} in one request.", "prompt")
    kind = type(first)
    budget = limits.max_prompt_chars  # what is left of it: shared by the batch's prompts
    out: list[str | list[int]] = []
    for index, item in enumerate(value):
        param = f"prompt[{index}]"
        if type(item) is not kind:
            raise type_error(param, "a string" if kind is str else "an array of token ids", item)
        if kind is str:
            out.append(_check_text(item, param, budget, len(out) > 0))
        else:
            out.append(_check_ids(item, param, budget, vocab_size, len(out) > 0))
        budget -= len(item)
    return out


def _check_text(text: str, param: str, max_chars: int, in_batch: bool = False) -> str:
    if not text:
        raise bad_request(f"'{param}' must not be empty.", param)
    if len(text) > max_chars:
        raise bad_request(f"'{param}' is too long: {len(text)} characters, the limit is {max_chars}"
                          f"{_SHARED if in_batch else ''}.", param)
    return text


def _check_ids(ids: list, param: str, max_ids: int, vocab_size: int, in_batch: bool = False) -> list[int]:
    # The character limit bounds the id count too: any window is far smaller, and it keeps the scan
    # below (and the later context-length refusal) cheap on the event loop.
    if len(ids) > max_ids:
        raise bad_request(f"'{param}' is too long: {len(ids)} token ids, the limit is {max_ids}"
                          f"{_SHARED if in_batch else ''}.", param)
    return check_token_ids(param, ids, vocab_size, allow_empty=False)


_SHARED = " (what the batch's earlier prompts left of --max-prompt-chars)"
