"""Tool calling over real HTTP with the official `openai` client, against SmolLM2 (whose template
ignores tools, so they reach it as a system message) started with --enable-auto-tool-choice and
--tool-call-parser hermes. The model is tiny: whatever it writes is either parsed into tool_calls or
returned as content, never an error; streamed replies, reassembled by the client's stream helper,
say what the whole reply says."""
from __future__ import annotations

import httpx
import openai
import orjson
import pytest

from live_server import start_server

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city"}},
                   "required": ["city"]}}}
ASK = [{"role": "user", "content": "What is the weather in Paris? Use the get_weather tool."}]
HISTORY = ASK + [
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_0123456789", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "tool", "tool_call_id": "call_0123456789", "content": "Sunny, 22 degrees Celsius."},
]
GREEDY = {"temperature": 0, "max_tokens": 16}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    server = start_server(tmp_path_factory.mktemp("tools"), "--enable-auto-tool-choice", "--tool-call-parser",
                          "hermes")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0)


def model(client) -> str:
    return client.models.list().data[0].id


def check_message(choice) -> None:
    """Either parsed calls (each of a known tool) or content; finish_reason says which."""
    message = choice.message
    if message.tool_calls:
        assert choice.finish_reason in ("tool_calls", "length")
        for call in message.tool_calls:
            assert call.type == "function" and call.id.startswith("call_")
            assert isinstance(call.function.arguments, str)
    else:
        assert isinstance(message.content, str) and choice.finish_reason in ("stop", "length")


def calls_of(message) -> list[tuple[str, str]]:
    return [(c.function.name, c.function.arguments) for c in message.tool_calls or []]


def test_auto_round_trip_and_stream_helper_agree(client):
    whole = client.chat.completions.create(model=model(client), messages=ASK, tools=[WEATHER], **GREEDY)
    check_message(whole.choices[0])
    with client.chat.completions.stream(model=model(client), messages=ASK, tools=[WEATHER], **GREEDY) as stream:
        streamed = stream.get_final_completion()
    assert (streamed.choices[0].message.content or None) == whole.choices[0].message.content
    assert calls_of(streamed.choices[0].message) == calls_of(whole.choices[0].message)
    assert streamed.choices[0].finish_reason == whole.choices[0].finish_reason


def test_a_tool_result_turn_in_the_history(client):
    """The earlier call and its result render (a template error would be a 400); with tool_choice
    none the reply is content, not parsed."""
    none = client.chat.completions.create(model=model(client), messages=HISTORY, tools=[WEATHER],
                                          tool_choice="none", **GREEDY)
    assert none.choices[0].message.tool_calls is None and isinstance(none.choices[0].message.content, str)
    assert none.choices[0].finish_reason in ("stop", "length")


def test_forced_choices_answer_with_a_call_or_content(client):
    """Without the grammar room (issue 44 part G) the tiny model is not held to the schema; its
    reply still parses into a call of the named tool or comes back as content."""
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        reply = client.chat.completions.create(model=model(client), messages=ASK, tools=[WEATHER],
                                               tool_choice=choice, **GREEDY)
        check_message(reply.choices[0])
        assert all(name == "get_weather" for name, _ in calls_of(reply.choices[0].message))


def test_forced_choices_always_parse_with_the_grammar(client):
    pytest.importorskip("structured")  # the grammar room (issue 44 part G)
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        reply = client.chat.completions.create(model=model(client), messages=ASK, tools=[WEATHER],
                                               tool_choice=choice, temperature=0, max_tokens=120)
        calls = reply.choices[0].message.tool_calls
        assert calls and calls[0].function.name == "get_weather"
        assert isinstance(orjson.loads(calls[0].function.arguments), dict)


@pytest.mark.parametrize("body, param", [
    ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools[0].function.name"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice.function.name"),
    ({"tools": [WEATHER, WEATHER]}, "tools[1].function.name"),
    ({"tool_choice": "required"}, "tool_choice"),
])
def test_bad_tools_are_400s_and_the_server_still_answers(server, client, body, param):
    r = httpx.post(f"{server.base_url}/v1/chat/completions", json={"messages": ASK, **body}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
    ok = client.chat.completions.create(model=model(client), messages=ASK, max_tokens=2)
    assert ok.choices[0].message.content is not None
