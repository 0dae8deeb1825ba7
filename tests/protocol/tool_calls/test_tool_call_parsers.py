"""The tool-call parsers over whole replies and the same replies split at every character: the
streamed pieces joined are exactly the whole reply's message, whatever the split."""
from __future__ import annotations

import itertools

import orjson
import pytest

from protocol.tool_calls.deltas import AssembledMessage
from protocol.tool_calls.forced import NamedCallParser, RequiredCallsParser
from protocol.tool_calls.hermes import HermesParser
from protocol.tool_calls.llama3_json import Llama3JsonParser
from protocol.tool_calls.mistral import MistralParser
from protocol.tool_calls.pythonic import PythonicParser


def _ids():
    counter = itertools.count()
    return lambda: f"call_{next(counter)}"


def parse(make, pieces: list[str]) -> AssembledMessage:
    parser = make(_ids())
    whole = AssembledMessage()
    for piece in pieces:
        whole.add(parser.feed(piece))
    whole.add(parser.finish())
    return whole


def call(index: int, name: str, arguments: str) -> dict:
    return {"id": f"call_{index}", "type": "function", "function": {"name": name, "arguments": arguments}}


def named(make_id):
    return NamedCallParser("get_weather", make_id)


CASES = [
    # hermes (Qwen2.5, Qwen3, Hermes)
    (HermesParser, 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
     "Let me check.", [call(0, "get_weather", '{"city": "Paris"}')]),
    (HermesParser, '<tool_call>{"arguments": {"a": [1, {"b": "}"}]}, "name": "f"}</tool_call>\n'
                   '<tool_call>{"name": "g"}</tool_call>',
     "", [call(0, "f", '{"a": [1, {"b": "}"}]}'), call(1, "g", "{}")]),
    (HermesParser, "plain answer, no calls", "plain answer, no calls", []),
    (HermesParser, "a <tool_call> that is not JSON", "a <tool_call> that is not JSON", []),
    (HermesParser, '<tool_call>{"nom": "x"}</tool_call> tail', '<tool_call>{"nom": "x"}</tool_call> tail', []),
    (HermesParser, '<tool_call>{"name": "f", "arguments": {"q": "cut sh', "", [call(0, "f", '{"q": "cut sh')]),
    (HermesParser, 'ends with half a tag <tool_ca', "ends with half a tag <tool_ca", []),
    (HermesParser, '<tool_call>{"name": "f", "arguments": {"s": "a\\"}b"}}</tool_call>', "",
     [call(0, "f", '{"s": "a\\"}b"}')]),
    # llama3_json (Llama 3.1, 3.2)
    (Llama3JsonParser, '<|python_tag|>{"name": "f", "parameters": {"x": 1}}; {"name": "g", "parameters": {}}', "",
     [call(0, "f", '{"x": 1}'), call(1, "g", "{}")]),
    (Llama3JsonParser, ' {"name": "f", "arguments": {"x": true}}', "", [call(0, "f", '{"x": true}')]),
    (Llama3JsonParser, '{"answer": 42}', '{"answer": 42}', []),
    (Llama3JsonParser, "Hello {not a call}", "Hello {not a call}", []),
    (Llama3JsonParser, '{"name": "f", "parameters": {"n": -1.5e3}} and then words', "and then words",
     [call(0, "f", '{"n": -1.5e3}')]),
    # mistral
    (MistralParser, 'Sure. [TOOL_CALLS] [{"name": "f", "arguments": {"a": "x"}}, {"name": "g", "arguments": {"b": 2}}]',
     "Sure.", [call(0, "f", '{"a": "x"}'), call(1, "g", '{"b": 2}')]),
    (MistralParser, "[TOOL_CALLS] nope", "[TOOL_CALLS] nope", []),
    (MistralParser, "no marker at all [TOOL", "no marker at all [TOOL", []),
    # mistral, v11+ tokenizers (Mistral Small 3.1+, Magistral): name[ARGS]{...}, a marker per call
    (MistralParser, 'Sure.[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]add[ARGS]{"a": {"b": "}"}}',
     "Sure.", [call(0, "get_weather", '{"city": "Paris"}'), call(1, "add", '{"a": {"b": "}"}}')]),
    (MistralParser, '[TOOL_CALLS]f[CALL_ID]a1B2c3D4e[ARGS]{"x": [1, 2]} then words', "then words",
     [call(0, "f", '{"x": [1, 2]}')]),
    (MistralParser, '[TOOL_CALLS]f{"s": "a\\"}b"}', "", [call(0, "f", '{"s": "a\\"}b"}')]),  # [ARGS] dropped
    (MistralParser, "[TOOL_CALLS]f[ARGS]", "", [call(0, "f", "{}")]),
    (MistralParser, '[TOOL_CALLS]f[ARGS]{"q": "cut sh', "", [call(0, "f", '{"q": "cut sh')]),
    (MistralParser, "[TOOL_CALLS]not a name[ARGS]{}", "[TOOL_CALLS]not a name[ARGS]{}", []),
    (MistralParser, "[TOOL_CALLS][ARGS]{}", "[TOOL_CALLS][ARGS]{}", []),
    (MistralParser, "[TOOL_CALLS]f[ARG", "[TOOL_CALLS]f[ARG", []),
    (MistralParser, '[TOOL_CALLS]f[ARGS]{"a": 1} and [TOOL_CALLS] nope', "and [TOOL_CALLS] nope",
     [call(0, "f", '{"a": 1}')]),
    # pythonic
    (PythonicParser, '[get_weather(city="Paris"), add(a=1, b=2.5, c=[1, "]"], d=None)]', "",
     [call(0, "get_weather", '{"city":"Paris"}'), call(1, "add", '{"a":1,"b":2.5,"c":[1,"]"],"d":null}')]),
    (PythonicParser, "[1, 2]", "[1, 2]", []),
    (PythonicParser, "[f(x)]", "[f(x)]", []),  # positional arguments are not a call
    (PythonicParser, "[f(a=__import__('os'))]", "[f(a=__import__('os'))]", []),  # literals only
    (PythonicParser, "[f(a=1)", "[f(a=1)", []),
    (PythonicParser, "words [f(a=1)]", "words [f(a=1)]", []),
    # forced: required and a named function
    (RequiredCallsParser, ' [{"name": "f", "parameters": {"a": 1}}, {"name": "g", "parameters": {}}]', "",
     [call(0, "f", '{"a": 1}'), call(1, "g", "{}")]),
    (RequiredCallsParser, "I would rather not", "I would rather not", []),
    (named, ' {"city": "Paris"}\n', "", [call(0, "get_weather", '{"city": "Paris"}')]),
    (named, "", "", []),
    (named, " The weather is nice.", "The weather is nice.", []),  # no grammar held it: content
]


@pytest.mark.parametrize("make, text, content, calls", CASES, ids=[f"{i}" for i in range(len(CASES))])
def test_whole_reply(make, text, content, calls):
    whole = parse(make, [text])
    assert (whole.content, whole.calls) == (content, calls)


@pytest.mark.parametrize("make, text, content, calls", CASES, ids=[f"{i}" for i in range(len(CASES))])
def test_every_split_gives_the_whole_reply(make, text, content, calls):
    whole = parse(make, [text])
    for at in range(len(text) + 1):
        assert parse(make, [text[:at], text[at:]]) == whole, at
    assert parse(make, list(text)) == whole


def test_a_streamed_call_announces_its_name_first_then_argument_pieces():
    parser = HermesParser(_ids())
    pieces = [parser.feed(c) for c in '<tool_call>{"name": "f", "arguments": {"a": 12}}</tool_call>']
    calls = [p for piece in pieces for p in piece.tool_calls]
    assert calls[0].as_dict() == {"index": 0, "id": "call_0", "type": "function",
                                  "function": {"name": "f", "arguments": ""}}
    assert all(p.id is None and p.name is None for p in calls[1:])
    assert "".join(p.arguments for p in calls) == '{"a": 12}'
    assert len(calls) > 3  # the arguments stream as they come, not at the call's end


def test_arguments_before_the_name_are_held_until_the_name():
    parser = HermesParser(_ids())
    first = parser.feed('<tool_call>{"arguments": {"a": 1}, ')
    assert not first.tool_calls
    second = parser.feed('"name": "f"}')
    assert [p.as_dict() for p in second.tool_calls] == [
        {"index": 0, "id": "call_0", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]


def test_parsed_arguments_are_json():
    whole = parse(HermesParser, ['<tool_call>{"name": "f", "arguments": {"a": [1, 2], "b": {"c": "d"}}}</tool_call>'])
    assert orjson.loads(whole.calls[0]["function"]["arguments"]) == {"a": [1, 2], "b": {"c": "d"}}


@pytest.mark.parametrize("cls", [HermesParser, Llama3JsonParser, MistralParser, PythonicParser, RequiredCallsParser])
def test_each_format_reads_the_calls_it_renders(cls):
    """What the generic tool prompt writes for earlier calls is what the parser reads back."""
    written = cls.render_calls([("get_weather", '{"city": "Paris"}'), ("add", '{"a": 1}')])
    whole = parse(cls, [written])
    assert [(c["function"]["name"], orjson.loads(c["function"]["arguments"])) for c in whole.calls] == [
        ("get_weather", {"city": "Paris"}), ("add", {"a": 1})]


def test_mistral_v11_call_announces_its_name_at_args_then_streams_the_arguments():
    parser = MistralParser(_ids())
    assert not parser.feed("[TOOL_CALLS]get_wea").tool_calls  # the name may go on
    assert not parser.feed("ther[AR").tool_calls  # [ARGS] may be coming
    first = parser.feed("GS]")
    assert [p.as_dict() for p in first.tool_calls] == [
        {"index": 0, "id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]
    assert [p.arguments for p in parser.feed('{"city": ').tool_calls] == ['{"city": ']
    assert [p.arguments for p in parser.feed('"Paris"}').tool_calls] == ['"Paris"}']
    assert parser.finish().content == "" and parser.num_calls == 1
