"""The tool-call parsers by name (`--tool-call-parser`), and the parser a request's choice needs."""
from __future__ import annotations

from typing import Callable

from protocol.tool_calls.definitions import ToolRequest
from protocol.tool_calls.deltas import new_call_id
from protocol.tool_calls.forced import NamedCallParser, RequiredCallsParser
from protocol.tool_calls.hermes import HermesParser
from protocol.tool_calls.llama3_json import Llama3JsonParser
from protocol.tool_calls.mistral import MistralParser
from protocol.tool_calls.parser import ToolCallParser
from protocol.tool_calls.pythonic import PythonicParser
from protocol.tool_calls.single_call import SingleCall

TOOL_CALL_PARSERS: dict[str, type[ToolCallParser]] = {
    cls.name: cls for cls in (Llama3JsonParser, HermesParser, MistralParser, PythonicParser)
}
TOOL_CALL_PARSER_NAMES = tuple(TOOL_CALL_PARSERS)


def parser_class(tools: ToolRequest, auto_parser: str | None) -> type[ToolCallParser] | None:
    """The format the reply to `tools` is read in: the forced choices' own, auto's configured one;
    None: tool calls are not parsed (tool_choice none)."""
    if tools.choice == "required":
        return RequiredCallsParser
    if tools.choice == "function":
        return NamedCallParser
    if tools.choice == "auto" and auto_parser is not None:
        return TOOL_CALL_PARSERS[auto_parser]
    return None


def new_parser(tools: ToolRequest, auto_parser: str | None,
               new_id: Callable[[], str] = new_call_id) -> ToolCallParser | SingleCall | None:
    """The parser of one reply; auto's keeps only the first call without parallel_tool_calls (the
    forced choices' grammars hold them to one call already)."""
    cls = parser_class(tools, auto_parser)
    if cls is None:
        return None
    if cls is NamedCallParser:
        assert tools.named is not None
        return NamedCallParser(tools.named, new_id)
    if tools.choice == "auto" and not tools.parallel:
        return SingleCall(cls(new_id))
    return cls(new_id)
