"""The fields that reach the logits themselves: `logit_bias` (OpenAI) and `prompt_logprobs` (vLLM).

logit_bias maps token ids, as JSON object keys (strings of decimal digits), to a bias in [-100, 100]
added to that token's logit before sampling. A key that is not a plain decimal integer ("+5",
" 5", "0x5", "٣"), an id outside the vocabulary, a duplicate id ("5" and "05") or a bias out of
range is a 400 naming the key, checked before tokenizing. The entry count is bounded
(`IngressLimits.max_logit_bias`): the sampler scatters every entry into the logits each step.

prompt_logprobs is a count of alternatives per prompt position, bounded by --max-logprobs like the
other logprob counts; with stream=true it is refused, as vLLM refuses it.
"""
from __future__ import annotations

from dataclasses import dataclass

from protocol.errors import bad_request
from protocol.requests.field_checks import describe, opt_dict, type_error
from protocol.limits import IngressLimits
from protocol.requests.fields import Bound, Context, Field, Int, Schema, Seen, opt

MAX_BIAS = 100.0


def max_logprobs(limits: IngressLimits) -> int:
    """The bound of every logprob count: completions `logprobs`, chat `top_logprobs`, `prompt_logprobs`."""
    return limits.max_logprobs

PROMPT_LOGPROBS_NEEDS_NO_STREAM: Schema = {
    "if": {"required": ["prompt_logprobs"], "properties": {"prompt_logprobs": {"type": "integer"}}},
    "then": {"properties": {"stream": {"enum": [False, None]}}},
}


@dataclass(frozen=True)
class LogitBias(Field):
    """`logit_bias` as (id, bias) pairs, ids ascending; () when absent or empty."""

    key: str = "logit_bias"
    absent = ()
    doc: str = ("Token id (a decimal string) -> a bias in [-100, 100] added to its logit before sampling; "
                "ids outside the vocabulary are a 400.")

    def parse(self, obj: dict, ctx: Context, seen: Seen) -> tuple[tuple[int, float], ...]:
        value = opt_dict(obj, self.key)
        if not value:
            return ()
        limits, vocab_size = ctx.limits, ctx.vocab_size
        if len(value) > limits.max_logit_bias:
            raise bad_request(
                f"'logit_bias' has {len(value)} entries; the limit is {limits.max_logit_bias}.", "logit_bias"
            )
        pairs: dict[int, float] = {}
        for key, bias in value.items():
            param = f"logit_bias.{key[:40]}"
            if not (key.isascii() and key.isdigit()):
                raise bad_request(f"'logit_bias' keys must be token ids (decimal integers), got {describe(key)}.",
                                  param)
            # (A key of thousands of digits is not even converted: int() of one costs time, past 4,300 raises.)
            token_id = int(key) if len(key) <= len(str(vocab_size)) else vocab_size
            if token_id >= vocab_size:
                raise bad_request(
                    f"'{param}': token id {key[:40]} is out of the vocabulary (ids must be in [0, {vocab_size})).",
                    param,
                )
            if token_id in pairs:
                raise bad_request(f"'logit_bias' names token id {token_id} twice.", param)
            if type(bias) is not float and type(bias) is not int:
                raise type_error(param, "a number", bias)
            if not -MAX_BIAS <= bias <= MAX_BIAS:  # (NaN fails it too; orjson refuses NaN anyway)
                raise bad_request(f"'{param}' must be between -100 and 100, got {describe(bias)}.", param)
            pairs[token_id] = float(bias)
        return tuple(sorted(pairs.items()))

    def schema(self, ctx: Context) -> Schema:
        # Keys: decimal ids without leading zeros (so no two keys name one id) and, when the vocabulary
        # is known, with fewer digits than its largest id, so that every key the schema allows is in it
        # (the server accepts every id below vocab_size: a narrower schema, never a wider one).
        vocab_size = ctx.vocab_size
        digits = "[0-9]*" if vocab_size is None else "[0-9]{0,%d}" % max(0, len(str(vocab_size - 1)) - 2)
        return opt({"type": "object", "maxProperties": ctx.limits.max_logit_bias,
                    "propertyNames": {"pattern": f"^(0|[1-9]{digits})$"},
                    "additionalProperties": {"type": "number", "minimum": -100, "maximum": 100}}, self.doc)


@dataclass(frozen=True)
class PromptLogprobs(Int):
    """Alternatives per prompt position, 0..max_logprobs; not with streaming."""

    key: str = "prompt_logprobs"
    lo: int = 0
    hi: Bound = max_logprobs
    doc: str = ("vLLM's: each prompt token's logprob and rank, plus this many alternatives per position. "
                "Not with stream=true.")

    def parse(self, obj: dict, ctx: Context, seen: Seen) -> int | None:
        k = super().parse(obj, ctx, seen)
        if k is not None and seen["stream"]:
            raise bad_request("'prompt_logprobs' is not available when 'stream' is true.", self.key)
        return k

    def rules(self, ctx: Context) -> list[Schema]:
        return [PROMPT_LOGPROBS_NEEDS_NO_STREAM]
