"""Structured outputs over HTTP against a live `ttft serve` of SmolLM2 (the default model, one
server for the file): every constrained output parses and validates (jsonschema, where installed)
over a set of schemas, regex / choice / grammar outputs match, on chat and completions; an
unconstrained greedy request is unchanged with constrained ones batched beside it; the official
openai client's `chat.completions.parse` returns a parsed object; a client that leaves mid-stream
frees its matcher and its KV blocks."""
from __future__ import annotations

import asyncio
import json
import re
import time

import httpx
import pytest
from exactness import ExactnessReport, compare_runs

SCHEMAS = {
    "nested": {"type": "object", "properties": {
        "person": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                                    "age": {"type": "integer", "minimum": 0, "maximum": 120}},
                   "required": ["name", "age"], "additionalProperties": False}},
        "required": ["person"], "additionalProperties": False},
    "array_enum": {"type": "object", "properties": {
        "colors": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "minItems": 1, "maxItems": 3}},
        "required": ["colors"], "additionalProperties": False},
    "number_range": {"type": "object", "properties": {
        "temperature": {"type": "number", "minimum": -10, "maximum": 40},
        "ok": {"type": "boolean"}}, "required": ["temperature", "ok"], "additionalProperties": False},
    "pattern": {"type": "object", "properties": {
        "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
        "code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{2}$"}},
        "required": ["zip", "code"], "additionalProperties": False},
    "optional_fields": {"type": "object", "properties": {
        "id": {"type": "integer", "minimum": 1, "maximum": 9999}, "note": {"type": "string", "maxLength": 8}},
        "required": ["id"], "additionalProperties": False},
    "top_level_array": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9},
                        "minItems": 2, "maxItems": 4},
}
MESSAGES = [{"role": "user", "content": "Reply in JSON about a person in Paris."}]


def chat(server, **body) -> httpx.Response:
    body.setdefault("messages", MESSAGES)
    body.setdefault("temperature", 0)
    body.setdefault("max_tokens", 120)
    with httpx.Client(timeout=120) as client:
        return client.post(f"{server.base_url}/v1/chat/completions", json=body)


def content(resp: httpx.Response) -> tuple[str, str]:
    assert resp.status_code == 200, resp.text
    choice = resp.json()["choices"][0]
    return choice.get("message", {}).get("content", choice.get("text")), choice["finish_reason"]


async def achat(client: httpx.AsyncClient, server, **body) -> httpx.Response:
    body = {"messages": MESSAGES, "temperature": 0, "max_tokens": 120, **body}
    return await client.post(f"{server.base_url}/v1/chat/completions", json=body)


def test_every_schema_output_parses_and_validates(smollm_server):
    jsonschema = pytest.importorskip("jsonschema")  # per test: the GPU host lacks it, the rest run there
    async def all_at_once():
        async with httpx.AsyncClient(timeout=300) as client:
            jobs = [achat(client, smollm_server, response_format={"type": "json_schema", "json_schema": {
                "name": name, "schema": schema, "strict": True}}) for name, schema in SCHEMAS.items()]
            jobs.append(achat(client, smollm_server, structured_outputs={"json": SCHEMAS["nested"]}, temperature=0.8,
                              seed=7, n=2))
            return await asyncio.gather(*jobs)

    replies = asyncio.run(all_at_once())
    for (name, schema), resp in zip(SCHEMAS.items(), replies):
        text, finish = content(resp)
        assert finish == "stop", (name, text)
        jsonschema.validate(json.loads(text), schema)
    for choice in replies[-1].json()["choices"]:
        assert choice["finish_reason"] == "stop"
        jsonschema.validate(json.loads(choice["message"]["content"]), SCHEMAS["nested"])


def test_json_object_mode_gives_a_json_object(smollm_server):
    text, finish = content(chat(smollm_server, response_format={"type": "json_object"}, max_tokens=100, messages=[
        {"role": "user", "content": "Give a JSON object with the key \"city\" set to Paris."}]))
    assert finish == "stop" and isinstance(json.loads(text), dict), text


@pytest.mark.parametrize("body, pattern", [
    ({"structured_outputs": {"regex": r"[A-Z][a-z]{2,8} is [0-9]{1,2}"}}, r"[A-Z][a-z]{2,8} is [0-9]{1,2}"),
    ({"guided_regex": r"(yes|no), because [a-z ]{5,20}\."}, r"(yes|no), because [a-z ]{5,20}\."),
    ({"structured_outputs": {"choice": ["Paris", "London", "Rome"]}}, r"Paris|London|Rome"),
    ({"guided_choice": ["positive", "negative"]}, r"positive|negative"),
    ({"structured_outputs": {"grammar": 'start: "city=" CITY ";"\nCITY: /[A-Z][a-z]+/\n'}}, r"city=[A-Z][a-z]+;"),
    ({"guided_grammar": 'root ::= "n=" [0-9] [0-9]'}, r"n=[0-9][0-9]"),  # GBNF
])
def test_regex_choice_and_grammar_outputs_match(smollm_server, body, pattern):
    text, finish = content(chat(smollm_server, **body))
    assert finish == "stop" and re.fullmatch(pattern, text), text


def test_completions_take_response_format_too(smollm_server):
    jsonschema = pytest.importorskip("jsonschema")
    with httpx.Client(timeout=120) as client:
        resp = client.post(f"{smollm_server.base_url}/v1/completions", json={
            "prompt": "The capital of France as JSON:", "max_tokens": 60, "temperature": 0,
            "response_format": {"type": "json_schema", "json_schema": {"name": "c", "schema": SCHEMAS["pattern"]}}})
    text, finish = content(resp)
    assert finish == "stop"
    jsonschema.validate(json.loads(text), SCHEMAS["pattern"])


def test_unconstrained_greedy_is_unchanged_beside_constrained_requests(smollm_server):
    free = {"messages": [{"role": "user", "content": "Name three rivers."}], "max_tokens": 24, "logprobs": True,
            "top_logprobs": 2}

    async def run():
        async with httpx.AsyncClient(timeout=300) as client:
            alone = await achat(client, smollm_server, **free)
            beside = await asyncio.gather(achat(client, smollm_server, **free), *[
                achat(client, smollm_server, response_format={"type": "json_schema", "json_schema": {
                    "name": n, "schema": s}}) for n, s in list(SCHEMAS.items())[:3]])
            return alone, beside

    alone, beside = asyncio.run(run())
    ref, ref_gaps = tokens_and_gaps(alone)
    report = ExactnessReport()
    compare_runs(report, "beside", ref, tokens_and_gaps(beside[0])[0], lambda i: ref_gaps[i])
    assert not report.failures, report.failures
    for resp in beside[1:]:
        assert content(resp)[1] == "stop"


def tokens_and_gaps(resp: httpx.Response) -> tuple[list[str], list[float]]:
    """A chat reply's tokens and the top-2 logprob gap at each (a logprob gap is the logit gap)."""
    entries = resp.json()["choices"][0]["logprobs"]["content"]
    gaps = [e["top_logprobs"][0]["logprob"] - e["top_logprobs"][1]["logprob"] if len(e["top_logprobs"]) > 1 else 0.0
            for e in entries]
    return [e["token"] for e in entries], gaps


def test_the_openai_clients_parse_returns_a_parsed_object(smollm_server):
    openai = pytest.importorskip("openai")
    from pydantic import BaseModel, Field

    class City(BaseModel):
        name: str = Field(max_length=12)
        population_millions: int = Field(ge=0, le=40)

    client = openai.OpenAI(base_url=f"{smollm_server.base_url}/v1", api_key="none", timeout=120)
    model = client.models.list().data[0].id
    completion = client.chat.completions.parse(
        model=model, messages=[{"role": "user", "content": "Describe Paris."}], response_format=City,
        temperature=0, max_tokens=60)
    parsed = completion.choices[0].message.parsed
    assert isinstance(parsed, City) and 0 <= parsed.population_millions <= 40


def test_a_client_that_leaves_mid_stream_frees_its_matcher_and_blocks(smollm_server):
    body = {"messages": MESSAGES, "max_tokens": 200, "temperature": 0, "stream": True,
            "structured_outputs": {"regex": "[a-z]{200}"}}
    with httpx.Client(timeout=60) as client:
        with client.stream("POST", f"{smollm_server.base_url}/v1/chat/completions", json=body) as resp:
            events = 0
            for line in resp.iter_lines():
                events += line.startswith("data:")
                if events >= 3:
                    break  # leave: the connection closes mid-stream
        deadline = time.monotonic() + 10
        while smollm_server.metric("ttft_kv_blocks", 'state="used"') and time.monotonic() < deadline:
            time.sleep(0.05)
        assert smollm_server.metric("ttft_kv_blocks", 'state="used"') == 0
        content(chat(smollm_server, max_tokens=2))  # finished ids reach the runner with the next step
        assert smollm_server.metric("ttft_grammar_matchers") == 0
