"""POST /tokenize and /detokenize (vLLM's routes): the bodies as typed requests, or a 400 naming the field.

/tokenize takes a `prompt` (text, with the model's special tokens unless add_special_tokens is
false) or chat `messages` (rendered by the chat template, add_generation_prompt as on chat
completions; the template writes its own special tokens, so add_special_tokens defaults to false),
never both. /detokenize takes `tokens`, ids of the vocabulary. The limits are the generation
routes' (characters, messages, ids), checked before any tokenizing.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ingress.chat_schema import parse_messages, parse_template_kwargs
from ingress.common_fields import UnsupportedTable, reject_unsupported
from ingress.errors import bad_request
from ingress.field_checks import check_token_ids, opt_bool, opt_str, type_error
from ingress.limits import IngressLimits

# vLLM fields that would change the answer if honoured; accepted only with their inert value.
TOKENIZE_UNSUPPORTED = UnsupportedTable((
    ("return_token_strs", lambda v: v is False, " (only false: token strings are not returned)"),
    ("continue_final_message", lambda v: v is False, " (only false)"),
    ("chat_template", lambda v: False, " (the server's template is used)"),
    ("tools", lambda v: v == [], ""),
    ("documents", lambda v: v == [], ""),
    ("mm_processor_kwargs", lambda v: v == {}, ""),
))


@dataclass(frozen=True, slots=True)
class TokenizeRequest:
    model: str | None
    prompt: str | None  # exactly one of prompt and messages
    messages: list[dict] | None
    add_special_tokens: bool
    add_generation_prompt: bool = True
    chat_template_kwargs: dict = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DetokenizeRequest:
    model: str | None
    tokens: list[int]


def parse_tokenize_request(obj: dict, limits: IngressLimits) -> TokenizeRequest:
    model = opt_str(obj, "model")
    reject_unsupported(obj, TOKENIZE_UNSUPPORTED)
    prompt, messages = obj.get("prompt"), obj.get("messages")
    if prompt is not None and messages is not None:
        raise bad_request("Give either 'prompt' or 'messages', not both.", "prompt")
    if messages is not None:
        return TokenizeRequest(
            model=model,
            prompt=None,
            messages=parse_messages(messages, limits),
            add_special_tokens=opt_bool(obj, "add_special_tokens", False),
            add_generation_prompt=opt_bool(obj, "add_generation_prompt", True),
            chat_template_kwargs=parse_template_kwargs(obj),
        )
    if prompt is None:
        raise bad_request("'prompt' (a text) or 'messages' (a chat) is required.", "prompt")
    if type(prompt) is not str:
        raise type_error("prompt", "a string", prompt)
    if len(prompt) > limits.max_prompt_chars:
        raise bad_request(f"'prompt' is too long: {len(prompt)} characters, the limit is "
                          f"{limits.max_prompt_chars}.", "prompt")
    return TokenizeRequest(model=model, prompt=prompt, messages=None,
                           add_special_tokens=opt_bool(obj, "add_special_tokens", True))


def parse_detokenize_request(obj: dict, limits: IngressLimits, vocab_size: int) -> DetokenizeRequest:
    model = opt_str(obj, "model")
    tokens = obj.get("tokens")
    if tokens is None:
        raise bad_request("'tokens' is required.", "tokens")
    if type(tokens) is list and len(tokens) > limits.max_prompt_chars:  # the bound of a prompt's ids
        raise bad_request(f"'tokens' is too long: {len(tokens)} token ids, the limit is "
                          f"{limits.max_prompt_chars}.", "tokens")
    return DetokenizeRequest(model, check_token_ids("tokens", tokens, vocab_size, allow_empty=True))
