"""The grammar that makes a `required` or named tool choice always parse, as vLLM builds it.

A named function: the output is that function's arguments object, its `parameters` schema. Required:
a JSON array of `{"name": ..., "parameters": {...}}` items, each one of the tools (anyOf over them),
at least one item, exactly one when parallel_tool_calls is false. Either applies after reasoning
ends: `after_token_ids` are the `</think>` ids when the output starts inside reasoning.
"""
from __future__ import annotations

from typing import Any

import orjson

from protocol.tool_calls.definitions import ToolFunction, ToolRequest
from stages.structured import StructuredOutput


def call_item_schema(function: ToolFunction) -> dict[str, Any]:
    """One call of `function` in a `required` answer."""
    return {"type": "object", "required": ["name", "parameters"], "additionalProperties": False,
            "properties": {"name": {"type": "string", "enum": [function.name]}, "parameters": function.parameters}}


def forced_schema(tools: ToolRequest) -> dict[str, Any] | None:
    """The JSON schema every answer must match, or None when the choice forces nothing (none, auto)."""
    if tools.choice == "function":
        assert tools.named is not None
        return tools.function(tools.named).parameters
    if tools.choice != "required":
        return None
    items = [call_item_schema(f) for f in tools.functions]
    schema: dict[str, Any] = {"type": "array", "minItems": 1,
                              "items": items[0] if len(items) == 1 else {"anyOf": items}}
    if not tools.parallel:
        schema["maxItems"] = 1
    return schema


def forced_output(tools: ToolRequest, after_token_ids: tuple[int, ...] = ()) -> StructuredOutput | None:
    """The StructuredOutput for the sampler's grammar, or None when the choice forces nothing."""
    schema = forced_schema(tools)
    if schema is None:
        return None
    return StructuredOutput("json_schema", orjson.dumps(schema).decode(), after_token_ids)
