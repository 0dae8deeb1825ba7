"""parallel_tool_calls false with tool_choice auto: the reply keeps its first call only, whole or
streamed at any split; a reply with one call or none is as the plain parser reads it."""
from __future__ import annotations

import itertools

import pytest

from protocol.tool_calls.deltas import AssembledMessage
from protocol.tool_calls.definitions import ToolFunction, ToolRequest
from protocol.tool_calls.hermes import HermesParser
from protocol.tool_calls.registry import new_parser
from protocol.tool_calls.single_call import SingleCall

F = ToolFunction("f", None, {"type": "object"})
G = ToolFunction("g", None, {"type": "object"})
TWO_CALLS = ('Let me see.<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>\n'
             '<tool_call>{"name": "g", "arguments": {"b": 2}}</tool_call> Done.')


def _ids():
    counter = itertools.count()
    return lambda: f"call_{next(counter)}"


def parse(reader, pieces: list[str]) -> AssembledMessage:
    whole = AssembledMessage()
    for piece in pieces:
        whole.add(reader.feed(piece))
    whole.add(reader.finish())
    return whole


def single(tools: ToolRequest = ToolRequest((F, G), "auto", parallel=False)):
    return new_parser(tools, "hermes", _ids())


def test_auto_without_parallel_calls_keeps_the_first_call():
    reader = single()
    assert isinstance(reader, SingleCall)
    whole = parse(reader, [TWO_CALLS])
    assert whole.calls == [{"id": "call_0", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]
    assert whole.content == "Let me see.Done."  # the dropped call is not content
    assert reader.num_calls == 1


@pytest.mark.parametrize("at", range(0, len(TWO_CALLS) + 1, 5))
def test_every_split_streams_the_same_single_call(at):
    whole = parse(single(), [TWO_CALLS])
    assert parse(single(), [TWO_CALLS[:at], TWO_CALLS[at:]]) == whole
    streamed = single()
    indices = {p.index for c in TWO_CALLS for p in streamed.feed(c).tool_calls} | {
        p.index for p in streamed.finish().tool_calls}
    assert indices == {0}


def test_one_call_or_none_reads_as_the_plain_parser_reads_it():
    one = '<tool_call>{"name": "g", "arguments": {}}</tool_call>'
    for text in (one, "just words"):
        assert parse(single(), [text]) == parse(HermesParser(_ids()), [text])
    assert single().num_calls == 0


def test_parallel_and_forced_choices_are_not_filtered():
    assert isinstance(new_parser(ToolRequest((F, G), "auto"), "hermes"), HermesParser)
    assert parse(new_parser(ToolRequest((F, G), "auto"), "hermes", _ids()), [TWO_CALLS]).calls[1]["id"] == "call_1"
    required = new_parser(ToolRequest((F, G), "required", parallel=False), "hermes")
    assert not isinstance(required, SingleCall)  # its grammar allows one call
