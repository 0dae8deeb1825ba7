"""POST /v1/completions: the body as a typed CompletionRequest, or a 400 naming the field."""
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
    prompt: str | list[int]  # text, or token ids already checked against the vocabulary
    params: SamplingParams  # max_tokens == self.max_tokens; the caller still checks the window
    max_tokens: int | None  # never None here (defaults to 16); typed like the chat request's
    stream: bool
    include_usage: bool
    priority: int = 0
    cache_salt: str | None = None
    n: int = 1  # choices: parallel samples of the prompt
    echo: bool = False  # the prompt's text (and, with logprobs, its logprobs) before the completion


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
    prompt = parse_prompt(obj.get("prompt"), limits, vocab_size)
    return CompletionRequest(
        model=common.model,
        prompt=prompt,
        params=params,
        max_tokens=max_tokens,
        stream=common.stream,
        include_usage=common.include_usage,
        priority=common.priority,
        cache_salt=common.cache_salt,
        n=common.n,
        echo=echo,
    )


def parse_prompt(value: object, limits: IngressLimits, vocab_size: int) -> str | list[int]:
    """A string, an array of token ids, or a batch of exactly one of those (batches: not yet)."""
    if value is None:
        raise bad_request("'prompt' is required.", "prompt")
    if type(value) is str:
        return _check_text(value, "prompt", limits)
    if type(value) is not list:
        raise type_error("prompt", "a string or an array of token ids", value)
    if not value:
        raise bad_request("'prompt' must not be empty.", "prompt")
    first = value[0]
    if type(first) is int:
        return _check_ids(value, "prompt", limits, vocab_size)
    if type(first) is str or type(first) is list:
        if len(value) > 1:
            raise bad_request(
                f"'prompt' holds {len(value)} prompts; batched prompts are not supported yet "
                "(send one request per prompt).", "prompt", "unsupported_parameter",
            )
        if type(first) is str:
            return _check_text(first, "prompt[0]", limits)
        return _check_ids(first, "prompt[0]", limits, vocab_size)
    raise type_error("prompt[0]", "a string, a token id or an array of token ids", first)


def _check_text(text: str, param: str, limits: IngressLimits) -> str:
    if not text:
        raise bad_request(f"'{param}' must not be empty.", param)
    if len(text) > limits.max_prompt_chars:
        raise bad_request(
            f"'{param}' is too long: {len(text)} characters, the limit is {limits.max_prompt_chars}.",
            param,
        )
    return text


def _check_ids(ids: list, param: str, limits: IngressLimits, vocab_size: int) -> list[int]:
    # The character limit bounds the id count too: any window is far smaller, and it keeps the scan
    # below (and the later context-length refusal) cheap on the event loop.
    if len(ids) > limits.max_prompt_chars:
        raise bad_request(
            f"'{param}' is too long: {len(ids)} token ids, the limit is {limits.max_prompt_chars}.", param
        )
    return check_token_ids(param, ids, vocab_size, allow_empty=False)
