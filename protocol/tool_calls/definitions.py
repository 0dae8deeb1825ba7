"""Tool definitions and the tool choice of a chat request, validated once at arrival.

`tools` is OpenAI's list of `{"type": "function", "function": {name, description, parameters,
strict}}`; `tool_choice` is "none", "auto", "required" or `{"type": "function", "function":
{"name"}}`; `parallel_tool_calls` lets an answer hold several calls (false: `required`'s grammar
allows one, auto's parser keeps the first). Each broken rule is a 400 naming the field. The tools
are bounded before anything renders them: a count cap, their JSON size counted with the prompt's
characters, and a nesting depth for each `parameters` schema (a schema a thousand levels deep costs
the template, the grammar and jsonschema alike).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

from protocol.errors import bad_request
from protocol.limits import IngressLimits
from protocol.requests.field_checks import describe, type_error

CHOICES = ("none", "auto", "required")
# OpenAI's rule for function names.
_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
MAX_SCHEMA_DEPTH = 32


@dataclass(frozen=True, slots=True)
class ToolFunction:
    name: str
    description: str | None
    parameters: dict  # a JSON schema of the arguments object
    strict: bool | None = None

    def as_tool(self) -> dict[str, Any]:
        """The OpenAI tool object, as chat templates read it (tool.function.name, ...)."""
        function: dict[str, Any] = {"name": self.name}
        if self.description is not None:
            function["description"] = self.description
        function["parameters"] = self.parameters
        return {"type": "function", "function": function}


@dataclass(frozen=True, slots=True)
class ToolRequest:
    """A chat request's tools and what it asks of them."""

    functions: tuple[ToolFunction, ...]
    choice: str  # "none", "auto", "required", or "function" (then `named` holds the name)
    named: str | None = None
    parallel: bool = True
    num_chars: int = 0  # the tools' JSON size, counted with the prompt's characters

    def template_tools(self) -> list[dict[str, Any]]:
        return [f.as_tool() for f in self.functions]

    def function(self, name: str) -> ToolFunction:
        return next(f for f in self.functions if f.name == name)


def parse_tool_request(obj: dict, limits: IngressLimits, parallel: bool = True) -> ToolRequest | None:
    """The body's tools and tool_choice (`parallel`: its parallel_tool_calls, read before), or None
    when it names no tools (a tool_choice other than "none" without tools is a 400)."""
    raw_tools = obj.get("tools")
    raw_choice = obj.get("tool_choice")
    functions = parse_tools(raw_tools, limits) if raw_tools is not None else ()
    num_chars = len(orjson.dumps(raw_tools)) if functions else 0
    if num_chars > limits.max_prompt_chars:
        raise bad_request(f"'tools' are too long: {num_chars} characters of JSON; the limit is "
                          f"{limits.max_prompt_chars}.", "tools")
    choice, named = parse_tool_choice(raw_choice, bool(functions))
    if not functions:
        if choice != "none":
            raise bad_request(f"'tool_choice' is {choice!r} but the request has no 'tools'.", "tool_choice")
        return None
    if choice == "auto" and not limits.enable_auto_tool_choice:
        raise bad_request('"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set '
                          '(with tools, tool_choice defaults to "auto").', "tool_choice")
    if named is not None and all(f.name != named for f in functions):
        raise bad_request(f"'tool_choice.function.name' is {named!r}, which is not one of the request's tools.",
                          "tool_choice.function.name")
    return ToolRequest(functions, choice, named, parallel, num_chars)


def parse_tools(value: Any, limits: IngressLimits) -> tuple[ToolFunction, ...]:
    if type(value) is not list:
        raise type_error("tools", "an array of tool objects", value)
    if len(value) > limits.max_tools:
        raise bad_request(f"'tools' has {len(value)} tools; this server allows at most {limits.max_tools}.", "tools")
    out: list[ToolFunction] = []
    seen: set[str] = set()
    for index, tool in enumerate(value):
        function = _parse_tool(tool, f"tools[{index}]")
        if function.name in seen:
            raise bad_request(f"'tools[{index}].function.name' {function.name!r} is given twice: tool names must "
                              "be unique.", f"tools[{index}].function.name")
        seen.add(function.name)
        out.append(function)
    return tuple(out)


def _parse_tool(tool: Any, where: str) -> ToolFunction:
    if type(tool) is not dict:
        raise type_error(where, "a tool object", tool)
    kind = tool.get("type")
    if kind is not None and kind != "function":
        raise bad_request(f"'{where}.type' is {describe(kind)}: only 'function' tools are supported.", f"{where}.type")
    function = tool.get("function")
    if type(function) is not dict:
        raise type_error(f"{where}.function", "an object with a 'name'", function)
    name = function.get("name")
    if type(name) is not str or not _NAME.match(name):
        shown = describe(name) if name is not None else "nothing"
        raise bad_request(f"'{where}.function.name' must be 1 to 64 letters, digits, '_', '.' or '-'; got {shown}.",
                          f"{where}.function.name")
    description = function.get("description")
    if description is not None and type(description) is not str:
        raise type_error(f"{where}.function.description", "a string", description)
    parameters = function.get("parameters")
    if parameters is None:
        parameters = {"type": "object", "properties": {}}
    elif type(parameters) is not dict:
        raise type_error(f"{where}.function.parameters", "a JSON schema object", parameters)
    else:
        check_depth(parameters, f"{where}.function.parameters")
    strict = function.get("strict")
    if strict is not None and strict is not True and strict is not False:
        raise type_error(f"{where}.function.strict", "a boolean", strict)
    return ToolFunction(name, description, parameters, strict)


def check_depth(schema: Any, where: str, max_depth: int = MAX_SCHEMA_DEPTH) -> None:
    """A 400 when `schema` nests objects or arrays deeper than `max_depth` (walked without recursion)."""
    stack = [(schema, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > max_depth:
            raise bad_request(f"'{where}' is nested more than {max_depth} levels deep.", where)
        if type(value) is dict:
            stack.extend((v, depth + 1) for v in value.values() if type(v) in (dict, list))
        elif type(value) is list:
            stack.extend((v, depth + 1) for v in value if type(v) in (dict, list))


def parse_tool_choice(value: Any, has_tools: bool) -> tuple[str, str | None]:
    """(choice, named function or None). Absent: "auto" with tools, "none" without (OpenAI's default)."""
    if value is None:
        return ("auto" if has_tools else "none"), None
    if type(value) is str:
        if value not in CHOICES:
            raise bad_request(f"'tool_choice' must be one of {', '.join(CHOICES)} or a function object; "
                              f"got {describe(value)}.", "tool_choice")
        return value, None
    if type(value) is not dict:
        raise type_error("tool_choice", "a string or a function object", value)
    if value.get("type") != "function":
        raise bad_request("'tool_choice.type' must be 'function'.", "tool_choice.type")
    function = value.get("function")
    name = function.get("name") if type(function) is dict else None
    if type(name) is not str:
        raise bad_request("'tool_choice.function.name' must be a string naming one of the tools.",
                          "tool_choice.function.name")
    return "function", name
