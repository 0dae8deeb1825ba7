"""Chat's tools, tool_choice and parallel_tool_calls: what is accepted, and a 400 naming the field
for each broken rule (checked before any rendering)."""
from __future__ import annotations

import pytest

from protocol.errors import ApiError
from protocol.limits import IngressLimits
from protocol.requests.chat import parse_chat_request

AUTO = IngressLimits(enable_auto_tool_choice=True)
PLAIN = IngressLimits()
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
ADD = {"type": "function", "function": {"name": "add", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}}


def chat(fields: dict, limits: IngressLimits = AUTO):
    return parse_chat_request({"messages": [{"role": "user", "content": "hi"}], **fields}, limits, 1000)


def refusal(fields: dict, limits: IngressLimits = AUTO) -> ApiError:
    with pytest.raises(ApiError) as info:
        chat(fields, limits)
    assert info.value.status == 400
    return info.value


def test_tools_with_auto_choice():
    tools = chat({"tools": [WEATHER, ADD]}).tools
    assert tools.choice == "auto" and tools.named is None and tools.parallel
    assert [f.name for f in tools.functions] == ["get_weather", "add"]
    assert tools.template_tools()[0] == WEATHER


@pytest.mark.parametrize("choice, kind, named", [
    ("none", "none", None), ("required", "required", None), ("auto", "auto", None),
    ({"type": "function", "function": {"name": "add"}}, "function", "add"),
])
def test_tool_choices(choice, kind, named):
    tools = chat({"tools": [WEATHER, ADD], "tool_choice": choice, "parallel_tool_calls": False}).tools
    assert (tools.choice, tools.named, tools.parallel) == (kind, named, False)


def test_no_tools_is_no_tool_request():
    assert chat({}).tools is None
    assert chat({"tools": [], "tool_choice": "none"}).tools is None
    assert chat({"tools": None, "tool_choice": None}).tools is None


def test_parameters_default_to_an_empty_object():
    tools = chat({"tools": [{"type": "function", "function": {"name": "now"}}]}).tools
    assert tools.functions[0].parameters == {"type": "object", "properties": {}}


def test_auto_needs_the_flag_in_vllms_words():
    for fields in ({"tools": [WEATHER]}, {"tools": [WEATHER], "tool_choice": "auto"}):
        err = refusal(fields, PLAIN)
        assert err.param == "tool_choice" and "--enable-auto-tool-choice" in err.message
    assert chat({"tools": [WEATHER], "tool_choice": "required"}, PLAIN).tools.choice == "required"


@pytest.mark.parametrize("fields, param, fragment", [
    ({"tools": {"name": "f"}}, "tools", "an array"),
    ({"tools": ["f"]}, "tools[0]", "a tool object"),
    ({"tools": [{"type": "retrieval", "function": {"name": "f"}}]}, "tools[0].type", "only 'function'"),
    ({"tools": [{"type": "function"}]}, "tools[0].function", "an object"),
    ({"tools": [{"type": "function", "function": {}}]}, "tools[0].function.name", "got nothing"),
    ({"tools": [{"type": "function", "function": {"name": "has space"}}]}, "tools[0].function.name", "1 to 64"),
    ({"tools": [{"type": "function", "function": {"name": "x" * 65}}]}, "tools[0].function.name", "1 to 64"),
    ({"tools": [{"type": "function", "function": {"name": "f", "description": 3}}]},
     "tools[0].function.description", "a string"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "object"}}]},
     "tools[0].function.parameters", "a JSON schema object"),
    ({"tools": [{"type": "function", "function": {"name": "f", "strict": "yes"}}]},
     "tools[0].function.strict", "a boolean"),
    ({"tools": [WEATHER, ADD, WEATHER]}, "tools[2].function.name", "given twice"),
    ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice", "must be one of"),
    ({"tools": [WEATHER], "tool_choice": 1}, "tool_choice", "a string or a function object"),
    ({"tools": [WEATHER], "tool_choice": {"type": "tool"}}, "tool_choice.type", "'function'"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {}}}, "tool_choice.function.name",
     "must be a string"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "add"}}},
     "tool_choice.function.name", "not one of the request's tools"),
    ({"tool_choice": "required"}, "tool_choice", "no 'tools'"),
    ({"tools": [], "tool_choice": "auto"}, "tool_choice", "no 'tools'"),
    ({"tool_choice": {"type": "function", "function": {"name": "f"}}}, "tool_choice", "no 'tools'"),
    ({"tools": [WEATHER], "parallel_tool_calls": "yes"}, "parallel_tool_calls", "a boolean"),
])
def test_bad_tools(fields, param, fragment):
    err = refusal(fields)
    assert err.param == param and fragment in err.message, (err.param, err.message)


def test_tool_count_and_size_are_capped():
    many = [{"type": "function", "function": {"name": f"f{i}"}} for i in range(5)]
    err = refusal({"tools": many}, IngressLimits(enable_auto_tool_choice=True, max_tools=4))
    assert err.param == "tools" and "at most 4" in err.message
    big = [{"type": "function", "function": {"name": "f", "description": "d" * 2000}}]
    err = refusal({"tools": big}, IngressLimits(enable_auto_tool_choice=True, max_prompt_chars=1000))
    assert err.param == "tools" and "too long" in err.message


def test_deep_parameter_schemas_are_refused_without_recursion():
    deep: dict = {"type": "object"}
    for _ in range(5000):  # far past Python's recursion limit
        deep = {"type": "object", "properties": {"x": deep}}
    err = refusal({"tools": [{"type": "function", "function": {"name": "f", "parameters": deep}}]})
    assert err.param == "tools[0].function.parameters" and "levels deep" in err.message


def test_assistant_tool_calls_and_tool_results_in_the_history():
    messages = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
            {"id": "call_2", "function": {"name": "f", "arguments": "not json"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "22 C"},
    ]
    req = parse_chat_request({"messages": messages, "tools": [WEATHER]}, AUTO, 1000)
    assert req.messages[1] == {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
        {"id": "call_2", "type": "function", "function": {"name": "f", "arguments": "not json"}}]}
    assert req.messages[2] == {"role": "tool", "content": "22 C", "tool_call_id": "call_1"}
    assert "tool_calls" not in req.messages[0]  # templates test whether the key is defined


def test_tool_call_arguments_count_toward_the_prompt_characters():
    call = {"id": "c", "function": {"name": "f", "arguments": '{"a": "' + "x" * 200 + '"}'}}
    with pytest.raises(ApiError) as info:
        parse_chat_request({"messages": [{"role": "user", "content": "hi"},
                                          {"role": "assistant", "content": None, "tool_calls": [call]}]},
                           IngressLimits(max_prompt_chars=100), 1000)
    assert info.value.param == "messages" and "too long" in info.value.message


def test_legacy_functions_stay_refused():
    for key, value in (("functions", [{"name": "f"}]), ("function_call", "auto")):
        err = refusal({key: value})
        assert err.code == "unsupported_parameter" and err.param == key


def test_forced_choices_carry_their_grammar_from_parse_time():
    """So that it compiles at arrival like a response_format's; auto and none force nothing."""
    for choice in ("required", {"type": "function", "function": {"name": "add"}}):
        structured = chat({"tools": [WEATHER, ADD], "tool_choice": choice}).params.structured
        assert structured is not None and structured.kind == "json_schema" and structured.after_token_ids == ()
    for choice in ("auto", "none"):
        assert chat({"tools": [WEATHER], "tool_choice": choice}).params.structured is None
