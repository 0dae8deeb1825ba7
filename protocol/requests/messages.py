"""Chat `messages` and `chat_template_kwargs`, as chat completions and /tokenize declare them.

Messages are normalized for the chat template: content becomes one string (text parts joined with
"\\n", as vLLM does), `developer` becomes `system` (the templates we serve know no developer role),
and only the keys a template may read are kept, so a request cannot smuggle other keys into it.
An assistant turn's `tool_calls` are kept in OpenAI's shape, their `arguments` given to the template
as an object when they are one (the templates write `arguments | tojson`), as vLLM does.
"""
from __future__ import annotations

from dataclasses import dataclass

import orjson

from protocol.errors import bad_request
from protocol.limits import IngressLimits
from protocol.requests.field_checks import describe, opt_dict, type_error
from protocol.requests.fields import EMPTY_ARRAY, NULL_ONLY, Context, Field, Schema, Seen, opt

ROLES = ("system", "user", "assistant", "developer", "tool")
ROLES_WITH_CONTENT = ["system", "user", "developer", "tool"]  # the assistant may omit content
_ROLE_ALIASES = {"developer": "system"}
_CALL_KEYS = frozenset({"tool_calls", "function_call"})
TOOL_CALL_SCHEMA: Schema = {
    "type": "object", "required": ["id", "function"],
    "properties": {"id": {"type": "string"}, "type": opt({"const": "function"}),
                   "function": {"type": "object", "required": ["name", "arguments"],
                                "properties": {"name": {"type": "string"}, "arguments": {"type": "string"}}}},
}
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
        for call in normalized.get("tool_calls", ()):
            num_chars += call["num_chars"]
            del call["num_chars"]
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
    calls = None
    if not _CALL_KEYS.isdisjoint(message):
        legacy = message.get("function_call")
        if legacy is not None and legacy != []:
            raise bad_request(f"'{where}.function_call' is not supported: use 'tool_calls'.",
                              f"{where}.function_call", "unsupported_parameter")
        calls = message.get("tool_calls")
        if calls is not None and calls != [] and role != "assistant":
            raise bad_request(f"'{where}.tool_calls' is only allowed on an assistant message.", f"{where}.tool_calls")
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
    if calls:  # present only when there are calls: templates test `message.tool_calls is defined`
        normalized["tool_calls"] = _parse_tool_calls(calls, f"{where}.tool_calls")
    if _EXTRA_KEYS.isdisjoint(message):
        return normalized
    for key in ("name", "tool_call_id"):
        extra = message.get(key)
        if extra is not None:
            if type(extra) is not str:
                raise type_error(f"{where}.{key}", "a string", extra)
            normalized[key] = extra
    return normalized


def _parse_tool_calls(calls: object, where: str) -> list[dict]:
    if type(calls) is not list:
        raise type_error(where, "an array of tool calls", calls)
    out = []
    for index, call in enumerate(calls):
        here = f"{where}[{index}]"
        if type(call) is not dict:
            raise type_error(here, "a tool call object", call)
        call_id = call.get("id")
        if type(call_id) is not str:
            raise type_error(f"{here}.id", "a string", call_id)
        kind = call.get("type")
        if kind is not None and kind != "function":
            raise bad_request(f"'{here}.type' must be 'function'.", f"{here}.type")
        function = call.get("function")
        if type(function) is not dict:
            raise type_error(f"{here}.function", "an object with 'name' and 'arguments'", function)
        name, arguments = function.get("name"), function.get("arguments")
        if type(name) is not str:
            raise type_error(f"{here}.function.name", "a string", name)
        if type(arguments) is not str:
            raise type_error(f"{here}.function.arguments", "a string of JSON", arguments)
        out.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": _arguments(arguments)},
                    "num_chars": len(name) + len(arguments)})
    return out


def _arguments(text: str) -> dict | str:
    """The arguments as an object when they are one (what templates expect), else the text."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return text
    return value if type(value) is dict else text


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
        "tool_calls": (opt({"type": "array", "items": TOOL_CALL_SCHEMA}, "The calls an assistant turn made.")
                       if "assistant" in roles else {**EMPTY_ARRAY, "description": "Only on assistant messages."}),
        "function_call": {**EMPTY_ARRAY, "description": "Not supported: use tool_calls."},
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
