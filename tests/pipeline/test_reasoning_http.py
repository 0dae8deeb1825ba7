"""The reasoning parser over real HTTP: SmolLM2 served with --reasoning-parser deepseek_r1 (its
replies start inside reasoning), asked to repeat a text that closes the block, with a small bias on
`</` so that the greedy reply writes `</think>` where the text has it. The text before it comes back
as `reasoning_content`, in the message and in stream deltas alike, and a response_format's grammar
(or a required tool choice's) holds only what follows the reasoning."""
from __future__ import annotations

import httpx
import openai
import orjson
import pytest

from live_server import start_server

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99}},
          "required": ["n"], "additionalProperties": False}
ASK = [{"role": "user", "content": 'Repeat this text exactly, nothing else: I think so.</think>{"n": 4}'}]
# "</" (SmolLM2's id 9617): the model hesitates between "</" and "<" before "think>".
CLOSE_BIAS = {"9617": 5}
BODY = {"messages": ASK, "temperature": 0, "max_tokens": 30, "logit_bias": CLOSE_BIAS,
        "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": SCHEMA}}}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    server = start_server(tmp_path_factory.mktemp("reasoning"), "--reasoning-parser", "deepseek_r1")
    yield server
    server.stop()


def post(server, body: dict) -> httpx.Response:
    return httpx.post(f"{server.base_url}/v1/chat/completions", json=body, timeout=120)


def test_reasoning_content_and_a_grammar_after_it(server):
    jsonschema = pytest.importorskip("jsonschema")  # per test: the GPU host lacks it
    r = post(server, BODY)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["message"]["reasoning_content"] == "I think so.", choice
    jsonschema.validate(orjson.loads(choice["message"]["content"]), SCHEMA)
    assert choice["finish_reason"] == "stop"


def test_streamed_deltas_say_what_the_message_says(server):
    whole = post(server, BODY).json()["choices"][0]
    reasoning, content, finish = [], [], None
    with httpx.stream("POST", f"{server.base_url}/v1/chat/completions", json={**BODY, "stream": True},
                      timeout=120) as r:
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choice = orjson.loads(line[6:])["choices"][0]
            reasoning.append(choice["delta"].get("reasoning_content") or "")
            content.append(choice["delta"].get("content") or "")
            finish = choice["finish_reason"] or finish
    assert "".join(reasoning) == whole["message"]["reasoning_content"]
    assert "".join(content) == whole["message"]["content"]
    assert finish == whole["finish_reason"]
    assert sum(1 for piece in reasoning if piece) > 1  # the reasoning streams as it is written
    assert "</think>" not in "".join(reasoning + content)


def test_a_reply_cut_inside_its_reasoning_has_null_content(server):
    """As vLLM answers: content null (not ""), and no content delta after the role chunk's."""
    body = {**BODY, "max_tokens": 3}
    message = post(server, body).json()["choices"][0]["message"]
    assert message["content"] is None and message["reasoning_content"], message
    with httpx.stream("POST", f"{server.base_url}/v1/chat/completions", json={**body, "stream": True},
                      timeout=120) as r:
        deltas = [orjson.loads(line[6:])["choices"][0]["delta"] for line in r.iter_lines()
                  if line.startswith("data: ") and line != "data: [DONE]"]
    assert [d for d in deltas if "content" in d] == [{"role": "assistant", "content": ""}] == deltas[:1]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == message["reasoning_content"]


def test_the_openai_client_reads_reasoning_and_a_forced_call_after_it(server):
    """The `openai` client keeps reasoning_content as an extra field; a required tool choice's grammar
    starts after the reasoning, so the call always parses."""
    jsonschema = pytest.importorskip("jsonschema")  # per test: the GPU host lacks it
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0)
    tool = {"type": "function", "function": {"name": "answer", "parameters": SCHEMA}}
    reply = client.chat.completions.create(model=client.models.list().data[0].id, messages=ASK, tools=[tool],
                                           tool_choice="required", parallel_tool_calls=False, temperature=0,
                                           max_tokens=40, logit_bias=CLOSE_BIAS)
    message = reply.choices[0].message
    assert message.model_extra["reasoning_content"] == "I think so.", message
    assert reply.choices[0].finish_reason == "tool_calls"
    [call] = message.tool_calls
    assert call.function.name == "answer"
    jsonschema.validate(orjson.loads(call.function.arguments), SCHEMA)
