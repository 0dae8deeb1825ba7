"""The generation options both endpoints share, validated into a SamplingParams.

The endpoint schemas decide max_tokens and logprobs (their spelling differs between completions and
chat) and pass them in; everything else is read here, once, with the same rules for both.
"""
from __future__ import annotations

from typing import Any

from ingress.errors import bad_request
from ingress.field_checks import (
    INT64_MIN,
    UINT64_MAX,
    check_token_ids,
    opt_bool,
    opt_float,
    opt_int,
    type_error,
)
from ingress.limits import IngressLimits
from ingress.logit_fields import parse_logit_bias
from stages.sampling import SamplingParams

# Below this a temperature is greedy. Dividing logits by 1e-300 overflows to inf and the softmax to
# NaN; vLLM uses the same threshold for the same reason.
SAMPLING_EPS = 1e-5


def parse_sampling(
    obj: dict,
    limits: IngressLimits,
    vocab_size: int,
    max_tokens: int | None,
    logprobs: int | None,
    prompt_logprobs: int | None = None,
) -> SamplingParams:
    """SamplingParams from the shared fields. With max_tokens None (chat, absent) the params carry
    the dataclass default as a placeholder: the caller fills it from the context window. The
    endpoint decides `logprobs` and `prompt_logprobs` (completions' echo asks for the latter)."""
    temperature = opt_float(obj, "temperature", 1.0, 0.0, limits.max_temperature)
    if temperature < SAMPLING_EPS:
        temperature = 0.0
    top_k = opt_int(obj, "top_k", None)
    if top_k is not None:
        if top_k < -1:
            raise bad_request(f"'top_k' must be -1 or 0 (disabled) or at least 1, got {top_k}.", "top_k")
        if top_k <= 0 or top_k >= vocab_size:
            top_k = None  # disabled, or keeps the whole vocabulary: the sampler can skip the filter
    min_tokens = opt_int(obj, "min_tokens", 0, lo=0)
    if max_tokens is not None and min_tokens > max_tokens:
        raise bad_request(
            f"'min_tokens' ({min_tokens}) must not exceed max_tokens ({max_tokens}).", "min_tokens"
        )
    kwargs: dict[str, Any] = dict(
        temperature=temperature,
        top_p=opt_float(obj, "top_p", 1.0, 0.0, 1.0, lo_open=True),
        top_k=top_k,
        min_p=opt_float(obj, "min_p", 0.0, 0.0, 1.0),
        presence_penalty=opt_float(obj, "presence_penalty", 0.0, -2.0, 2.0),
        frequency_penalty=opt_float(obj, "frequency_penalty", 0.0, -2.0, 2.0),
        repetition_penalty=opt_float(obj, "repetition_penalty", 1.0, 0.0, 2.0, lo_open=True),
        seed=opt_int(obj, "seed", None, INT64_MIN, UINT64_MAX),
        stop=parse_stop(obj.get("stop"), limits),
        stop_token_ids=parse_stop_token_ids(obj.get("stop_token_ids"), limits, vocab_size),
        ignore_eos=opt_bool(obj, "ignore_eos", False),
        logprobs=logprobs,
        skip_special_tokens=opt_bool(obj, "skip_special_tokens", True),
        include_stop_str_in_output=opt_bool(obj, "include_stop_str_in_output", False),
        min_tokens=min_tokens,
        logit_bias=parse_logit_bias(obj, limits, vocab_size),
        prompt_logprobs=prompt_logprobs,
    )
    if max_tokens is not None:
        kwargs["max_tokens"] = max_tokens
    return SamplingParams(**kwargs)


def parse_stop(value: Any, limits: IngressLimits) -> tuple[str, ...]:
    """`stop`: a string or an array of strings, each non-empty; duplicates dropped, order kept."""
    if value is None:
        return ()
    if type(value) is str:
        stops = [value]
        names = ["stop"]
    elif type(value) is list:
        if len(value) > limits.max_stop_strings:
            raise bad_request(
                f"'stop' has {len(value)} strings; the limit is {limits.max_stop_strings}.", "stop"
            )
        stops = value
        names = [f"stop[{i}]" for i in range(len(value))]
    else:
        raise type_error("stop", "a string or an array of strings", value)
    for name, stop in zip(names, stops):
        if type(stop) is not str:
            raise type_error(name, "a string", stop)
        if not stop:
            raise bad_request(f"'{name}' is empty: a stop string must have at least one character.", name)
        if len(stop) > limits.max_stop_string_chars:
            raise bad_request(
                f"'{name}' is too long: {len(stop)} characters, the limit is "
                f"{limits.max_stop_string_chars}.", name,
            )
    return tuple(dict.fromkeys(stops))


def parse_stop_token_ids(value: Any, limits: IngressLimits, vocab_size: int) -> tuple[int, ...]:
    if value is None:
        return ()
    ids = check_token_ids("stop_token_ids", value, vocab_size, allow_empty=True)
    if len(ids) > limits.max_stop_token_ids:
        raise bad_request(
            f"'stop_token_ids' has {len(ids)} ids; the limit is {limits.max_stop_token_ids}.",
            "stop_token_ids",
        )
    return tuple(dict.fromkeys(ids))


def parse_max_tokens(obj: dict, key: str, limits: IngressLimits) -> int | None:
    """An explicit max_tokens-like field: an int >= 1, at most the configured cap."""
    max_tokens = opt_int(obj, key, None, lo=1)
    cap = limits.max_tokens_cap
    if max_tokens is not None and cap is not None and max_tokens > cap:
        raise bad_request(f"'{key}' is {max_tokens}; this server allows at most {cap}.", key)
    return max_tokens


def parse_logprobs_count(obj: dict, key: str, limits: IngressLimits) -> int | None:
    """Completions `logprobs` / chat `top_logprobs`: alternatives per position, 0..max_logprobs."""
    return opt_int(obj, key, None, 0, limits.max_logprobs)


__all__ = ["parse_sampling", "parse_stop", "parse_max_tokens", "parse_logprobs_count"]
