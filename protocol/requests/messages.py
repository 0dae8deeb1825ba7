"""Chat `messages` and `chat_template_kwargs`, as chat completions and /tokenize declare them.

Messages are normalized for the chat template: content becomes one string (text parts joined with
"\\n", as vLLM does), `developer` becomes `system` (the templates we serve know no developer role),
and only the keys a template may read are kept, so a request cannot smuggle other keys into it.
"""
from __future__ import annotations

from dataclasses import dataclass

from protocol.errors import bad_request
from protocol.limits import IngressLimits
from protocol.requests.field_checks import describe, opt_dict, type_error
from protocol.requests.fields import EMPTY_ARRAY, NULL_ONLY, Context, Field, Schema, Seen, opt

ROLES = ("system", "user", "assistant", "developer", "tool")
ROLES_WITH_CONTENT = ["system", "user", "developer", "tool"]  # the assistant may omit content
_ROLE_ALIASES = {"developer": "system"}
_CALL_KEYS = frozenset({"tool_calls", "function_call"})
_EXTRA_KEYS = frozenset({"name", "tool_call_id"})
# Names the renderer itself passes to the template: chat_template_kwargs cannot override them.
RESERVED_TEMPLATE_KWARGS = frozenset({
    "messages", "add_generation_prompt", "continue_final_message", "tools", "documents",
    "bos_token", "eos_token", "pad_token", "unk_token", "raise_exception", "chat_template",
})


@dataclass(frozen=True)
class Messages(Field):
    key: str = "messages"
    required: bool = True

    def parse(self, obj: dict, ctx: Context, seen: Seen) -> list[dict]:
        return parse_messages(obj.get(self.key), ctx.limits)

    def schema(self, ctx: Context) -> Schema:
        limits = ctx.limits
        return {
            "type": "array",
            "minItems": 1,
            "maxItems": limits.max_messages,
            "items": {"oneOf": [_message_schema(limits, ROLES_WITH_CONTENT, True),
                                _message_schema(limits, ["assistant"], False)]},
            "description": f"All contents together at most {limits.max_prompt_chars} characters. "
                           "'developer' is treated as 'system'.",
        }


def parse_messages(value: object, limits: IngressLimits) -> list[dict]:
    if value is None:
        raise bad_request("'messages' is required.", "messages")
    if type(value) is not list:
        raise type_error("messages", "an array of message objects", value)
    if not value:
        raise bad_request("'messages' must not be empty.", "messages")
    if len(value) > limits.max_messages:
        raise bad_request(f"'messages' has {len(value)} messages; the limit is {limits.max_messages}.", "messages")
    out = []
    num_chars = 0
    for index, message in enumerate(value):
        normalized = _parse_message(message, f"messages[{index}]")
        num_chars += len(normalized["content"])
        if num_chars > limits.max_prompt_chars:
            raise bad_request(f"'messages' are too long: more than {limits.max_prompt_chars} characters of content.",
                              "messages")
        out.append(normalized)
    return out


def _parse_message(message: object, where: str) -> dict:
    if type(message) is not dict:
        raise type_error(where, "a message object", message)
    role = message.get("role")
    if type(role) is not str or role not in ROLES:
        shown = describe(role) if role is not None else "nothing"
        raise bad_request(f"'{where}.role' must be one of {', '.join(ROLES)}; got {shown}.", f"{where}.role")
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
            raise bad_request(f"'{here}.type' is {describe(kind)}: only 'text' content parts are supported.",
                              f"{here}.type", "unsupported_parameter")
        text = part.get("text")
        if type(text) is not str:
            raise type_error(f"{here}.text", "a string", text)
        texts.append(text)
    return "\n".join(texts)


def _message_schema(limits: IngressLimits, roles: list[str], content_required: bool) -> Schema:
    part = {"type": "object", "required": ["type", "text"],
            "properties": {"type": {"const": "text"}, "text": {"type": "string"}}}
    content = {"anyOf": [{"type": "string", "maxLength": limits.max_prompt_chars}, {"type": "array", "items": part}],
               "description": "A string, or text parts joined with newlines (only type 'text')."}
    props: Schema = {
        "role": {"type": "string", "enum": roles},
        "content": content if content_required else {"anyOf": [*content["anyOf"], NULL_ONLY]},
        "name": opt({"type": "string"}),
        "tool_call_id": opt({"type": "string"}),
        "tool_calls": {**EMPTY_ARRAY, "description": "Tool calls are not supported."},
        "function_call": {**EMPTY_ARRAY, "description": "Function calls are not supported."},
    }
    return {"type": "object", "required": ["role", "content"] if content_required else ["role"],
            "properties": props}


@dataclass(frozen=True)
class TemplateKwargs(Field):
    """Extra template variables; the names the renderer sets itself are refused."""

    key: str = "chat_template_kwargs"

    def parse(self, obj: dict, ctx: Context, seen: Seen) -> dict:
        kwargs = opt_dict(obj, self.key)
        if not kwargs:
            return {}
        reserved = RESERVED_TEMPLATE_KWARGS.intersection(kwargs)
        if reserved:
            name = sorted(reserved)[0]
            raise bad_request(f"'chat_template_kwargs.{name}' cannot be set: the server sets it.",
                              f"chat_template_kwargs.{name}")
        return kwargs

    def schema(self, ctx: Context) -> Schema:
        return opt({"type": "object", "propertyNames": {"not": {"enum": sorted(RESERVED_TEMPLATE_KWARGS)}},
                    "description": "Extra template variables; the names the server sets are refused."})
