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

from ingress.errors import bad_request
from ingress.field_checks import describe, opt_dict, opt_int, type_error
from ingress.limits import IngressLimits

MAX_BIAS = 100.0


def parse_logit_bias(obj: dict, limits: IngressLimits, vocab_size: int) -> tuple[tuple[int, float], ...]:
    """`logit_bias` as (id, bias) pairs, ids ascending; () when absent or empty."""
    value = opt_dict(obj, "logit_bias")
    if not value:
        return ()
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


def parse_prompt_logprobs(obj: dict, limits: IngressLimits, stream: bool) -> int | None:
    """`prompt_logprobs`: alternatives per prompt position, 0..max_logprobs; not with streaming."""
    k = opt_int(obj, "prompt_logprobs", None, 0, limits.max_logprobs)
    if k is not None and stream:
        raise bad_request("'prompt_logprobs' is not available when 'stream' is true.", "prompt_logprobs")
    return k


__all__ = ["parse_logit_bias", "parse_prompt_logprobs", "MAX_BIAS"]
