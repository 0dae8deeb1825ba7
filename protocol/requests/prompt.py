"""Completions' `prompt`: a text, an array of token ids, or a batch of those (an array of texts, or
an array of arrays of ids).

A batch holds at most `max_batch_prompts` prompts, and at most `max_prompt_chars` characters (or
ids) in all, so that a batch costs what one long prompt may cost. Not both kinds in one batch, as in
OpenAI's and vLLM's schemas.
"""
from __future__ import annotations

from dataclasses import dataclass

from protocol.errors import bad_request
from protocol.limits import IngressLimits
from protocol.requests.field_checks import check_token_ids, type_error
from protocol.requests.fields import Context, Field, Schema, Seen, token_id

_SHARED = " (what the batch's earlier prompts left of --max-prompt-chars)"


@dataclass(frozen=True)
class Prompt(Field):
    key: str = "prompt"
    required: bool = True

    def parse(self, obj: dict, ctx: Context, seen: Seen) -> list[str | list[int]]:
        return parse_prompts(obj.get(self.key), ctx.limits, ctx.vocab_size)

    def schema(self, ctx: Context) -> Schema:
        limits = ctx.limits
        text = {"type": "string", "minLength": 1, "maxLength": limits.max_prompt_chars}
        ids = {"type": "array", "items": token_id(ctx.vocab_size), "minItems": 1, "maxItems": limits.max_prompt_chars}
        batch = {"minItems": 1, "maxItems": limits.max_batch_prompts}
        return {
            "oneOf": [text, ids, {"type": "array", "items": text, **batch}, {"type": "array", "items": ids, **batch}],
            "description": "Text, token ids, or a batch: texts or arrays of token ids (one kind per batch), each "
                           "prompt its own request with its n choices, choice i * n + j being prompt i's j-th. "
                           f"All the prompts together at most {limits.max_prompt_chars} characters (or ids).",
        }


def parse_prompts(value: object, limits: IngressLimits, vocab_size: int) -> list[str | list[int]]:
    """One prompt or a batch, as a list of prompts."""
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
