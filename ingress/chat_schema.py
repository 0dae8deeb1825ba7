"""POST /v1/chat/completions: the body as a typed ChatCompletionRequest, or a 400 naming the field.

Messages are normalized for the chat template: content becomes one string (text parts joined with
"\\n", as vLLM does), `developer` becomes `system` (the templates we serve know no developer role),
and only the keys a template may read are kept, so a request cannot smuggle other keys into it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ingress.common_fields import CHAT_UNSUPPORTED, parse_common
from ingress.errors import bad_request
from ingress.field_checks import describe, opt_bool, opt_dict, type_error
from ingress.limits import IngressLimits
from ingress.logit_fields import parse_prompt_logprobs
from ingress.sampling_fields import parse_logprobs_count, parse_max_tokens, parse_sampling
from stages.sampling import SamplingParams

ROLES = ("system", "user", "assistant", "developer", "tool")
_ROLE_ALIASES = {"developer": "system"}
_CALL_KEYS = frozenset({"tool_calls", "function_call"})
_EXTRA_KEYS = frozenset({"name", "tool_call_id"})
# Names the renderer itself passes to the template: chat_template_kwargs cannot override them.
RESERVED_TEMPLATE_KWARGS = frozenset({
    "messages", "add_generation_prompt", "continue_final_message", "tools", "documents",
    "bos_token", "eos_token", "pad_token", "unk_token", "raise_exception", "chat_template",
})


@dataclass(frozen=True, slots=True)
class ChatCompletionRequest:
    model: str | None
    messages: list[dict]  # {"role", "content": str} (+ "name", "tool_call_id" when given)
    params: SamplingParams  # max_tokens is a placeholder when self.max_tokens is None
    max_tokens: int | None  # None: the caller fills the rest of the context window
    stream: bool
    include_usage: bool
    add_generation_prompt: bool = True
    chat_template_kwargs: dict = field(default_factory=dict)
    priority: int = 0
    cache_salt: str | None = None
    n: int = 1  # choices: parallel samples of the prompt


def parse_chat_request(obj: dict, limits: IngressLimits, vocab_size: int) -> ChatCompletionRequest:
    common = parse_common(obj, limits, CHAT_UNSUPPORTED)
    # max_completion_tokens replaced max_tokens in OpenAI's chat API; both are checked, the new wins.
    max_tokens = parse_max_tokens(obj, "max_tokens", limits)
    max_completion_tokens = parse_max_tokens(obj, "max_completion_tokens", limits)
    if max_completion_tokens is not None:
        max_tokens = max_completion_tokens
    params = parse_sampling(obj, limits, vocab_size, max_tokens, _parse_logprobs(obj, limits),
                            parse_prompt_logprobs(obj, limits, common.stream))
    messages = parse_messages(obj.get("messages"), limits)
    return ChatCompletionRequest(
        model=common.model,
        messages=messages,
        params=params,
        max_tokens=max_tokens,
        stream=common.stream,
        include_usage=common.include_usage,
        add_generation_prompt=opt_bool(obj, "add_generation_prompt", True),
        chat_template_kwargs=parse_template_kwargs(obj),
        priority=common.priority,
        cache_salt=common.cache_salt,
        n=common.n,
    )


def _parse_logprobs(obj: dict, limits: IngressLimits) -> int | None:
    """Chat spells it `logprobs: true` plus `top_logprobs: k`; internally it is one count (or None)."""
    wanted = opt_bool(obj, "logprobs", False)
    top = parse_logprobs_count(obj, "top_logprobs", limits)
    if top is not None and not wanted:
        raise bad_request("'top_logprobs' requires 'logprobs' to be true.", "top_logprobs")
    if not wanted:
        return None
    return top or 0


def parse_messages(value: object, limits: IngressLimits) -> list[dict]:
    if value is None:
        raise bad_request("'messages' is required.", "messages")
    if type(value) is not list:
        raise type_error("messages", "an array of message objects", value)
    if not value:
        raise bad_request("'messages' must not be empty.", "messages")
    if len(value) > limits.max_messages:
        raise bad_request(
            f"'messages' has {len(value)} messages; the limit is {limits.max_messages}.", "messages"
        )
    out = []
    num_chars = 0
    for index, message in enumerate(value):
        normalized = _parse_message(message, f"messages[{index}]")
        num_chars += len(normalized["content"])
        if num_chars > limits.max_prompt_chars:
            raise bad_request(
                f"'messages' are too long: more than {limits.max_prompt_chars} characters of content.",
                "messages",
            )
        out.append(normalized)
    return out


def _parse_message(message: object, where: str) -> dict:
    if type(message) is not dict:
        raise type_error(where, "a message object", message)
    role = message.get("role")
    if type(role) is not str or role not in ROLES:
        shown = describe(role) if role is not None else "nothing"
        raise bad_request(
            f"'{where}.role' must be one of {', '.join(ROLES)}; got {shown}.", f"{where}.role"
        )
    if not _CALL_KEYS.isdisjoint(message):
        for key in _CALL_KEYS.intersection(message):
            calls = message[key]
            if calls is not None and calls != []:
                raise bad_request(f"'{where}.{key}' is not supported (tool calls are not supported).",
                                  f"{where}.{key}", "unsupported_parameter")
    content = message.get("content")
    if type(content) is str:
        text = content
    elif content is None and role == "assistant":
        text = ""  # an assistant turn may carry no content (OpenAI allows it with tool calls)
    elif type(content) is list:
        text = _join_parts(content, f"{where}.content")
    elif content is None:
        raise bad_request(f"'{where}.content' is required.", f"{where}.content")
    else:
        raise type_error(f"{where}.content", "a string or an array of content parts", content)
    normalized = {"role": _ROLE_ALIASES.get(role, role), "content": text}
    if _EXTRA_KEYS.isdisjoint(message):
        return normalized
    for key in ("name", "tool_call_id"):
        extra = message.get(key)
        if extra is not None:
            if type(extra) is not str:
                raise type_error(f"{where}.{key}", "a string", extra)
            normalized[key] = extra
    return normalized


def _join_parts(parts: list, where: str) -> str:
    texts = []
    for index, part in enumerate(parts):
        here = f"{where}[{index}]"
        if type(part) is not dict:
            raise type_error(here, "a content part object", part)
        kind = part.get("type")
        if kind != "text":
            if type(kind) is not str:
                raise type_error(f"{here}.type", "a string", kind)
            raise bad_request(
                f"'{here}.type' is {describe(kind)}: only 'text' content parts are supported.",
                f"{here}.type", "unsupported_parameter",
            )
        text = part.get("text")
        if type(text) is not str:
            raise type_error(f"{here}.text", "a string", text)
        texts.append(text)
    return "\n".join(texts)


def parse_template_kwargs(obj: dict) -> dict:
    kwargs = opt_dict(obj, "chat_template_kwargs")
    if not kwargs:
        return {}
    reserved = RESERVED_TEMPLATE_KWARGS.intersection(kwargs)
    if reserved:
        name = sorted(reserved)[0]
        raise bad_request(
            f"'chat_template_kwargs.{name}' cannot be set: the server sets it.",
            f"chat_template_kwargs.{name}",
        )
    return kwargs
