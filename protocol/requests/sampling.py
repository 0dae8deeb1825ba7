"""The generation options both endpoints declare, and the SamplingParams they become.

The endpoints decide max_tokens and logprobs (their spelling differs between completions and chat)
and derive `EFFECTIVE_MAX_TOKENS` before these fields, which min_tokens is compared with; everything
else is declared here, once, with the same rules for both.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from protocol.errors import bad_request
from protocol.requests.field_checks import INT64_MIN, UINT64_MAX, check_token_ids, opt_int, type_error
from protocol.requests.fields import NULL_ONLY, Bool, Context, Field, Float, Int, Schema, Seen, opt, token_id
from protocol.requests.logit_fields import LogitBias
from protocol.requests.structured_fields import STRUCTURED, StructuredField
from stages.sampling import SamplingParams

# Below this a temperature is greedy. Dividing logits by 1e-300 overflows to inf and the softmax to
# NaN; vLLM uses the same threshold for the same reason.
SAMPLING_EPS = 1e-5
EFFECTIVE_MAX_TOKENS = "<max_tokens>"  # the endpoint's max_tokens in effect (None: the window's rest)


@dataclass(frozen=True)
class TopK(Field):
    """-1 or 0 disable the filter; a k that keeps the whole vocabulary is no filter either (None)."""

    key: str = "top_k"
    doc: str = "-1 or 0 disable the filter."
    absent = None

    def parse(self, obj: dict, ctx: Context, seen: Seen) -> int | None:
        top_k = opt_int(obj, self.key, None)
        if top_k is None:
            return None
        if top_k < -1:
            raise bad_request(f"'top_k' must be -1 or 0 (disabled) or at least 1, got {top_k}.", self.key)
        return None if top_k <= 0 or top_k >= ctx.vocab_size else top_k

    def schema(self, ctx: Context) -> Schema:
        return opt({"type": "integer", "minimum": -1, "maximum": UINT64_MAX}, self.doc)


@dataclass(frozen=True)
class MinTokens(Int):
    """At least 0, and at most the max_tokens in effect when there is one (a comparison of two
    fields, which the schema can only describe)."""

    key: str = "min_tokens"
    default: int = 0
    lo: int = 0
    doc: str = "At most max_tokens (when max_tokens is given; not expressible in the schema)."

    def parse(self, obj: dict, ctx: Context, seen: Seen) -> int:
        min_tokens = super().parse(obj, ctx, seen)
        max_tokens = seen[EFFECTIVE_MAX_TOKENS]
        if max_tokens is not None and min_tokens > max_tokens:
            raise bad_request(f"'min_tokens' ({min_tokens}) must not exceed max_tokens ({max_tokens}).", self.key)
        return min_tokens


@dataclass(frozen=True)
class Stop(Field):
    """A string or an array of strings, each non-empty; duplicates dropped, order kept."""

    key: str = "stop"
    doc: str = "Stop strings (not included in the output unless include_stop_str_in_output)."
    absent = ()

    def parse(self, obj: dict, ctx: Context, seen: Seen) -> tuple[str, ...]:
        return parse_stop(obj.get(self.key), ctx)

    def schema(self, ctx: Context) -> Schema:
        one = {"type": "string", "minLength": 1, "maxLength": ctx.limits.max_stop_string_chars}
        return {"anyOf": [NULL_ONLY, one, {"type": "array", "items": one, "maxItems": ctx.limits.max_stop_strings}],
                "description": self.doc}


def parse_stop(value: Any, ctx: Context) -> tuple[str, ...]:
    limits = ctx.limits
    if value is None:
        return ()
    if type(value) is str:
        stops = [value]
        names = ["stop"]
    elif type(value) is list:
        if len(value) > limits.max_stop_strings:
            raise bad_request(f"'stop' has {len(value)} strings; the limit is {limits.max_stop_strings}.", "stop")
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
            raise bad_request(f"'{name}' is too long: {len(stop)} characters, the limit is "
                              f"{limits.max_stop_string_chars}.", name)
    return tuple(dict.fromkeys(stops))


@dataclass(frozen=True)
class StopTokenIds(Field):
    key: str = "stop_token_ids"
    absent = ()

    def parse(self, obj: dict, ctx: Context, seen: Seen) -> tuple[int, ...]:
        value = obj.get(self.key)
        if value is None:
            return ()
        ids = check_token_ids(self.key, value, ctx.vocab_size, allow_empty=True)
        if len(ids) > ctx.limits.max_stop_token_ids:
            raise bad_request(f"'stop_token_ids' has {len(ids)} ids; the limit is {ctx.limits.max_stop_token_ids}.",
                              self.key)
        return tuple(dict.fromkeys(ids))

    def schema(self, ctx: Context) -> Schema:
        return opt({"type": "array", "items": token_id(ctx.vocab_size), "maxItems": ctx.limits.max_stop_token_ids})


SAMPLING_FIELDS: tuple[Field, ...] = (  # in the order they are read
    Float("temperature", 1.0, 0, lambda limits: limits.max_temperature),
    TopK(),
    MinTokens(),
    Float("top_p", 1.0, 0, 1, lo_open=True),
    Float("min_p", 0.0, 0, 1),
    Float("presence_penalty", 0.0, -2, 2),
    Float("frequency_penalty", 0.0, -2, 2),
    Float("repetition_penalty", 1.0, 0, 2, lo_open=True),
    Int("seed", None, INT64_MIN, UINT64_MAX),
    Stop(),
    StopTokenIds(),
    Bool("ignore_eos", False),
    Bool("skip_special_tokens", True),
    Bool("include_stop_str_in_output", False),
    LogitBias(),
    StructuredField(),
)


def sampling_params(seen: Seen, logprobs: int | None, prompt_logprobs: int | None) -> SamplingParams:
    """SamplingParams from the fields read. Without a max_tokens in effect (chat, absent) the params
    carry the dataclass default as a placeholder: the caller fills it from the context window."""
    temperature = seen["temperature"]
    kwargs: dict[str, Any] = dict(
        temperature=0.0 if temperature < SAMPLING_EPS else temperature,
        top_p=seen["top_p"],
        top_k=seen["top_k"],
        min_p=seen["min_p"],
        presence_penalty=seen["presence_penalty"],
        frequency_penalty=seen["frequency_penalty"],
        repetition_penalty=seen["repetition_penalty"],
        seed=seen["seed"],
        stop=seen["stop"],
        stop_token_ids=seen["stop_token_ids"],
        ignore_eos=seen["ignore_eos"],
        logprobs=logprobs,
        skip_special_tokens=seen["skip_special_tokens"],
        include_stop_str_in_output=seen["include_stop_str_in_output"],
        min_tokens=seen["min_tokens"],
        logit_bias=seen["logit_bias"],
        prompt_logprobs=prompt_logprobs,
        structured=seen[STRUCTURED],
    )
    if seen[EFFECTIVE_MAX_TOKENS] is not None:
        kwargs["max_tokens"] = seen[EFFECTIVE_MAX_TOKENS]
    if kwargs["structured"] is not None and kwargs["min_tokens"]:
        # A grammar may be complete before min_tokens, leaving the sampler no token it may draw.
        raise bad_request("'min_tokens' cannot be combined with a structured output.", "min_tokens")
    return SamplingParams(**kwargs)
