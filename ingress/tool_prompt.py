"""Tools for chat templates that do not render them, the way llama.cpp serves such models: the
tools described in the system message with how to call them, and the calls of earlier assistant
turns written into their content in that same format.

Whether a template renders tools is probed once: it is given a tool with an unlikely name, and the
name must show up in the prompt. A template that renders them (Llama 3.1, Qwen, Mistral, Hermes)
gets `tools=` as transformers passes it, and nothing is added.
"""
from __future__ import annotations

import json

from ingress.chat_template import ChatTemplate
from protocol.tool_calls.definitions import ToolRequest
from protocol.tool_calls.hermes import HermesParser
from protocol.tool_calls.parser import ToolCallParser

_PROBE_NAME = "ttft_probe_function_3f9a"
_PROBE_TOOLS = [{"type": "function", "function": {"name": _PROBE_NAME, "description": "probe",
                                                  "parameters": {"type": "object", "properties": {}}}}]


def renders_tools(template: ChatTemplate) -> bool:
    """Whether `template` writes the tools it is given into the prompt."""
    try:
        text = template.render([{"role": "user", "content": "hi"}], add_generation_prompt=True, tools=_PROBE_TOOLS)
    except ValueError:
        return True  # it reads tools in a way the probe does not satisfy: leave it to the template
    return _PROBE_NAME in text


def tools_system_text(tools: ToolRequest, call_format: type[ToolCallParser]) -> str:
    """The system message's description of the tools and how to call them."""
    listed = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools.template_tools())
    if tools.choice == "function":
        ask = f"You must call the function {tools.named}. {call_format.instructions}"
    elif tools.choice == "required":
        ask = f"You must call at least one function. {call_format.instructions}"
    else:
        ask = f"Call a function only when it helps to answer. {call_format.instructions}"
    return f"You can call these functions:\n{listed}\n\n{ask}"


def with_generic_tools(messages: list[dict], tools: ToolRequest | None, call_format: type[ToolCallParser] | None,
                       history_format: type[ToolCallParser] | None = None) -> list[dict]:
    """`messages` for a template that ignores tools: the tools in the system message (unless the
    choice is none) with how to call them in `call_format`, earlier calls written into their
    assistant turns' content in `history_format` (both hermes' when None)."""
    call_format = call_format or HermesParser
    history_format = history_format or HermesParser
    out = []
    for message in messages:
        calls = message.get("tool_calls")
        if calls:
            message = {k: v for k, v in message.items() if k != "tool_calls"}
            written = history_format.render_calls([(c["function"]["name"], _arguments_text(c["function"]["arguments"]))
                                                for c in calls])
            message["content"] = f"{message['content']}\n{written}" if message["content"] else written
        out.append(message)
    if tools is None or tools.choice == "none":
        return out
    text = tools_system_text(tools, call_format)
    if out and out[0]["role"] == "system":
        out[0] = {**out[0], "content": f"{out[0]['content']}\n\n{text}" if out[0]["content"] else text}
    else:
        out.insert(0, {"role": "system", "content": text})
    return out


def _arguments_text(arguments: dict | str) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
