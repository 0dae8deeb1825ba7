"""The chat request's tool fields as declarations: `parallel_tool_calls`, `tools` (which reads
tool_choice with it) and `tool_choice` on its own (only "none" without tools), each with
its JSON Schema, so that the OpenAPI document refuses what the rules refuse.

Two rules JSON Schema cannot state are the rules' alone: tool names unique within a request, a
named tool_choice naming one of the tools (and the depth and size bounds of definitions.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from protocol.requests.fields import Bool, Context, Field, Schema, Seen, opt
from protocol.tool_calls.definitions import CHOICES, ToolRequest, parse_tool_choice, parse_tool_request
from protocol.errors import bad_request

_FUNCTION_NAME: Schema = {"type": "string", "pattern": "^[A-Za-z0-9_.\\-]{1,64}$"}
_NAMED_CHOICE: Schema = {
    "type": "object", "required": ["type", "function"],
    "properties": {"type": {"const": "function"},
                   "function": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}},
}


def _choices(ctx: Context) -> list[str]:
    return [c for c in CHOICES if c != "auto" or ctx.limits.enable_auto_tool_choice]


@dataclass(frozen=True)
class Tools(Field):
    key: str = "tools"
    absent = None

    def parse(self, obj: dict, ctx: Context, seen: Seen) -> ToolRequest | None:
        return parse_tool_request(obj, ctx.limits, seen.get("parallel_tool_calls", True))

    def schema(self, ctx: Context) -> Schema:
        function = {"type": "object", "required": ["name"], "properties": {
            "name": _FUNCTION_NAME, "description": opt({"type": "string"}),
            "parameters": opt({"type": "object", "description": "A JSON schema of the arguments object."}),
            "strict": opt({"type": "boolean"})}}
        tool = {"type": "object", "required": ["function"],
                "properties": {"type": opt({"const": "function"}), "function": function}}
        return opt({"type": "array", "items": tool, "maxItems": ctx.limits.max_tools},
                   "Functions the model may call (names unique). Rendered into the prompt by the chat template.")

    def properties(self, ctx: Context) -> dict[str, Schema]:
        return {
            "tools": self.schema(ctx),
            "tool_choice": {"anyOf": [{"enum": [*_choices(ctx), None]}, _NAMED_CHOICE],
                            "description": "none, required, a named function (one of the tools), or auto (only "
                                           "with --enable-auto-tool-choice; the default when tools are given)."},
        }

    def rules(self, ctx: Context) -> list[Schema]:
        has_tools: Schema = {"required": ["tools"], "properties": {"tools": {"type": "array", "minItems": 1}}}
        rules: list[Schema] = [{  # a choice other than none needs tools
            "if": {"required": ["tool_choice"],
                   "properties": {"tool_choice": {"not": {"enum": ["none", None]}}}},
            "then": has_tools,
        }]
        if not ctx.limits.enable_auto_tool_choice:  # tools without a choice would default to auto
            rules.append({"if": has_tools, "then": {"required": ["tool_choice"],
                                                     "properties": {"tool_choice": {"not": {"type": "null"}}}}})
        return rules


@dataclass(frozen=True)
class ToolChoice(Field):
    """tool_choice without tools: only "none" (with tools, `Tools` has read it)."""

    key: str = "tool_choice"
    absent = None

    def parse(self, obj: dict, ctx: Context, seen: Seen) -> None:
        value = obj.get(self.key)
        if value is not None and obj.get("tools") is None:
            choice, _ = parse_tool_choice(value, False)
            if choice != "none":
                raise bad_request(f"'tool_choice' is {choice!r} but the request has no 'tools'.", self.key)
        return None

    def properties(self, ctx: Context) -> dict[str, Schema]:
        return {}  # declared by Tools


def tool_fields() -> tuple[Field, ...]:
    """The chat declaration's tool fields, in reading order."""
    return (Bool("parallel_tool_calls", True, "Whether the answer may hold several calls; false: one (required's "
                                              "grammar allows one, auto keeps the first call written)."),
            Tools(), ToolChoice())
