"""Structured outputs' bad input and faults over HTTP (a `ttft serve --model dummy:tiny` with a small
--max-grammar-chars): invalid schemas, regexes, grammars and types, two ways of asking at once,
oversized specs and a compile past --grammar-compile-timeout-s are 400s naming the field (or the
flag), with nothing left queued (a request queued beside a compile that outlasted its tokenizing is
aborted first: test_late_compile.py); a compile that raises something else is a 500 with its
message, never a traceback."""
from __future__ import annotations

import asyncio
import concurrent.futures
import uuid

import httpx
import pytest

from ingress.structured_check import StructuredCheck
from protocol.errors import ApiError
from stages.sampling import SamplingParams
from stages.structured import StructuredOutput
from structured.compiler import GrammarCompiler

MAX_GRAMMAR_CHARS = 300
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def server(launch):
    return launch("--model", "dummy:tiny", "--max-model-len", "256", "--max-grammar-chars", str(MAX_GRAMMAR_CHARS))


@pytest.fixture(scope="module")
def impatient(launch):
    return launch("--model", "dummy:tiny", "--max-model-len", "256", "--grammar-compile-timeout-s", "0.000001")


def post(server, body: dict, path: str = "/v1/chat/completions") -> httpx.Response:
    body = {"max_tokens": 4, **({"messages": MESSAGES} if "chat" in path else {"prompt": "hi"}), **body}
    with httpx.Client(timeout=30) as client:
        return client.post(server.base_url + path, json=body)


BAD = [  # (body, the param the 400 names, words of its message)
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "objectx"}}}},
     "response_format.json_schema.schema", "does not compile"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
     "response_format.json_schema.schema", "must be a JSON schema object"),
    ({"response_format": {"type": "xml"}}, "response_format.type", "must be"),
    ({"response_format": "json"}, "response_format", "must be an object"),
    ({"structured_outputs": {"regex": "a(b"}}, "structured_outputs.regex", "unclosed group"),
    ({"structured_outputs": {"grammar": "start: nothing_defined"}}, "structured_outputs.grammar", "unknown name"),
    ({"structured_outputs": {"grammar": 'root ::= "a'}}, "structured_outputs.grammar", "does not compile"),
    ({"structured_outputs": {"choice": []}}, "structured_outputs.choice", "non-empty array"),
    ({"structured_outputs": {"choice": ["a", 3]}}, "structured_outputs.choice[1]", "non-empty string"),
    ({"structured_outputs": {"json": "{not json"}}, "structured_outputs.json", "not JSON text"),
    ({"structured_outputs": {"regex": "a", "choice": ["b"]}}, "structured_outputs", "exactly one"),
    ({"structured_outputs": {}}, "structured_outputs", "exactly one"),
    ({"structured_outputs": {"xml": "a"}}, "structured_outputs.xml", "not supported"),
    ({"guided_regex": "a", "guided_choice": ["b"]}, "guided_regex", "both ask for structured output"),
    ({"guided_json": {"type": "object"}, "response_format": {"type": "json_object"}}, "response_format",
     "both ask for structured output"),
    ({"guided_regex": 5}, "guided_regex", "non-empty string"),
    ({"guided_grammar": "x" * (MAX_GRAMMAR_CHARS + 1)}, "guided_grammar", "--max-grammar-chars"),
    ({"structured_outputs": {"json": {"enum": ["x" * MAX_GRAMMAR_CHARS]}}}, "structured_outputs.json",
     "--max-grammar-chars"),
]


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
@pytest.mark.parametrize("body, param, words", BAD)
def test_bad_structured_input_is_a_400_naming_the_field(server, path, body, param, words):
    resp = post(server, body, path)
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["param"] == param and words in error["message"], error
    assert "Traceback" not in resp.text


def test_a_compile_past_the_timeout_is_a_400_naming_the_flag(impatient):
    regex = f"[a-z]+{uuid.uuid4().hex}"  # never seen: it must compile
    resp = post(impatient, {"structured_outputs": {"regex": regex}})
    assert resp.status_code == 400
    assert "--grammar-compile-timeout-s" in resp.json()["error"]["message"]
    assert impatient.metric("ttft_requests_in_flight", 'state="waiting"') == 0


def test_refused_requests_never_reach_the_queue(server):
    before = server.metric("ttft_grammar_compiles_total")
    for body, _, _ in BAD[:3]:
        post(server, body)
    assert server.metric("ttft_open_streams") == 0
    assert server.metric("ttft_grammar_compiles_total") - before <= 1  # the shape errors never compiled


class RaisingBackend:
    name = "raising"

    def compile(self, kind: str, spec: str):
        raise RuntimeError("the backend broke")


async def test_a_compile_that_raises_is_a_500_with_its_message():
    compiler = GrammarCompiler(RaisingBackend)
    try:
        check = StructuredCheck(compiler, timeout_s=5.0)
        params = SamplingParams(structured=StructuredOutput("regex", "a", param="guided_regex"))
        with pytest.raises(ApiError) as info:
            await check.check(params)
        err = info.value
        assert err.status == 500 and err.param == "guided_regex" and "the backend broke" in err.message
    finally:
        compiler.close()


async def test_a_timed_out_compile_goes_on_for_the_next_request():
    release = concurrent.futures.Future()

    class SlowBackend:
        name = "slow"

        def compile(self, kind: str, spec: str):
            release.result(5)
            return "compiled"

    compiler = GrammarCompiler(SlowBackend)
    try:
        check = StructuredCheck(compiler, timeout_s=0.05)
        params = SamplingParams(structured=StructuredOutput("regex", "a"))
        with pytest.raises(ApiError) as info:
            await check.check(params)
        assert info.value.status == 400
        release.set_result(None)
        await asyncio.sleep(0.05)
        await check.check(params)  # the same compile, finished meanwhile: a cache hit
        assert compiler.num_compiles == 1
    finally:
        compiler.close()


@pytest.mark.parametrize("extra", [{"structured_outputs": {"choice": ["yes"]}},
                                   {"response_format": {"type": "json_object"}}])
def test_min_tokens_beside_a_grammar_is_a_400_naming_it(extra) -> None:
    """A grammar complete before min_tokens would leave the sampler nothing to draw (a 500 before)."""
    from protocol.errors import ApiError
    from protocol.limits import IngressLimits
    from protocol.requests.chat import parse_chat_request
    body = {"messages": [{"role": "user", "content": "x"}], "min_tokens": 5, "max_tokens": 8, **extra}
    with pytest.raises(ApiError) as err:
        parse_chat_request(body, IngressLimits(), 1024)
    assert err.value.status == 400 and err.value.param == "min_tokens"
