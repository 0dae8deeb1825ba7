"""The schema a `required` or named tool choice forces: sample outputs that follow it validate
(jsonschema) and parse into the calls, and outputs that break it do not validate."""
from __future__ import annotations

import itertools

import jsonschema
import orjson
import pytest

from protocol.limits import IngressLimits
from protocol.requests.chat import parse_chat_request
from protocol.tool_calls.deltas import AssembledMessage
from protocol.tool_calls.forced_schema import forced_output, forced_schema
from protocol.tool_calls.registry import new_parser

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": False}}}
ADD = {"type": "function", "function": {"name": "add", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}


def tools(choice, parallel: bool = True):
    body = {"messages": [{"role": "user", "content": "hi"}], "tools": [WEATHER, ADD], "tool_choice": choice,
            "parallel_tool_calls": parallel}
    return parse_chat_request(body, IngressLimits(enable_auto_tool_choice=True), 1000).tools


def parsed(request, text: str) -> AssembledMessage:
    counter = itertools.count()
    parser = new_parser(request, None, lambda: f"call_{next(counter)}")
    whole = AssembledMessage()
    whole.add(parser.feed(text))
    whole.add(parser.finish())
    return whole


REQUIRED_GOOD = [
    '[{"name": "get_weather", "parameters": {"city": "Paris"}}]',
    '[{"name": "add", "parameters": {"a": 1, "b": 2}}, {"name": "get_weather", "parameters": {"city": "Oslo"}}]',
]
REQUIRED_BAD = [
    "[]", '{"name": "add", "parameters": {"a": 1, "b": 2}}', '[{"name": "mul", "parameters": {}}]',
    '[{"name": "add", "parameters": {"a": "one", "b": 2}}]', '[{"name": "get_weather", "parameters": {}}]',
    '[{"name": "add", "parameters": {"a": 1, "b": 2}, "extra": 1}]',
]


@pytest.mark.parametrize("text", REQUIRED_GOOD)
def test_required_outputs_that_follow_the_schema_parse_into_the_calls(text):
    request = tools("required")
    jsonschema.validate(orjson.loads(text), forced_schema(request))
    calls = parsed(request, text).calls
    assert [(c["function"]["name"], orjson.loads(c["function"]["arguments"])) for c in calls] == [
        (item["name"], item["parameters"]) for item in orjson.loads(text)]


@pytest.mark.parametrize("text", REQUIRED_BAD)
def test_required_schema_refuses_what_is_not_a_call_of_a_tool(text):
    assert not jsonschema.Draft202012Validator(forced_schema(tools("required"))).is_valid(orjson.loads(text))


def test_one_call_only_without_parallel_tool_calls():
    schema = forced_schema(tools("required", parallel=False))
    assert schema["maxItems"] == 1
    assert not jsonschema.Draft202012Validator(schema).is_valid(orjson.loads(REQUIRED_GOOD[1]))


def test_a_named_function_forces_its_arguments():
    request = tools({"type": "function", "function": {"name": "add"}})
    schema = forced_schema(request)
    assert schema == ADD["function"]["parameters"]
    jsonschema.validate({"a": 1, "b": 2}, schema)
    assert not jsonschema.Draft202012Validator(schema).is_valid({"a": 1})
    calls = parsed(request, '{"a": 1, "b": 2}').calls
    assert calls == [{"id": "call_0", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}]


def test_the_structured_output_waits_for_the_end_of_reasoning():
    out = forced_output(tools("required"), after_token_ids=(7, 8))
    assert out.kind == "json_schema" and out.after_token_ids == (7, 8)
    assert orjson.loads(out.spec) == forced_schema(tools("required"))
    assert forced_output(tools("none")) is None and forced_output(tools("auto")) is None
