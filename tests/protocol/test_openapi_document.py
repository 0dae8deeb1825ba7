"""build_openapi: a valid OpenAPI 3.1 document whose request schemas agree with the validation, body by body.

Agreement is checked three ways: hand-picked good bodies pass both the schema and the parser; the
bad bodies of the ingress tests fail both (except the documented gaps JSON Schema cannot express);
and schemathesis' own generators, positive and negative, drive the ingress stage in process.
"""
from __future__ import annotations

import asyncio
import functools
import importlib.util
import json
import sys
import math
from pathlib import Path

import jsonschema
import orjson
import pytest
from openapi_spec_validator import validate as validate_openapi

from protocol.requests.structured_fields import KEYS as STRUCTURED_KEYS
from protocol.responses.bodies import ResponseAccumulator, completion_body
from protocol.responses.chunks import ChatChunker, CompletionChunker
from protocol.responses.envelope import Echo, ResponseMeta
from ingress.chat_template import ChatTemplate
from ingress.dummy_tokenizer import DUMMY_CHAT_TEMPLATE, DummyTokenizer
from protocol.errors import ApiError, bad_request, overloaded, payload_too_large, unauthorized
from protocol.limits import IngressLimits
from protocol.tool_calls.definitions import MAX_SCHEMA_DEPTH
from protocol.requests.chat import parse_chat_request
from protocol.requests.completion import parse_completion_request
from ingress.stage import IngressStage
from protocol.requests.tokenize import parse_detokenize_request, parse_tokenize_request
from protocol.openapi import build_openapi
from stages.messages import PromptScores, RequestOutput, TokenLogprob
from stages.trace import RequestTrace

MODEL = "dummy:tiny"
VOCAB = 1000
MAX_MODEL_LEN = 1024
REQUEST_TESTS = Path(__file__).resolve().parent / "requests"
USER = {"role": "user", "content": "hi"}


def validator(doc: dict, name: str) -> jsonschema.Draft202012Validator:
    # $ref resolves against the root, so the component is validated with the document's components.
    return jsonschema.Draft202012Validator({"$ref": f"#/components/schemas/{name}",
                                            "components": doc["components"]})


@functools.lru_cache(maxsize=None)
def tokenize_validators(limits: IngressLimits, vocab: int = VOCAB) -> tuple:
    doc = build_openapi(MODEL, limits, MAX_MODEL_LEN, vocab)
    return validator(doc, "TokenizeRequest"), validator(doc, "DetokenizeRequest")


@functools.lru_cache(maxsize=None)
def validators(limits: IngressLimits, vocab: int = VOCAB) -> tuple:
    doc = build_openapi(MODEL, limits, MAX_MODEL_LEN, vocab)
    return validator(doc, "CompletionRequest"), validator(doc, "ChatCompletionRequest")


def accepted(parse, body: dict, limits: IngressLimits, vocab: int = VOCAB) -> bool:
    """Whether ingress accepts the body as it arrives over the wire (through JSON text and orjson)."""
    try:
        obj = orjson.loads(json.dumps(body))
    except orjson.JSONDecodeError:
        return False  # NaN, Infinity: not JSON
    try:
        parse(obj, limits, vocab)
    except ApiError as err:
        assert err.status == 400
        return False
    return True


# ---- the document itself ------------------------------------------------------------------------

@pytest.mark.parametrize("auth_required, protect_metrics", [(False, False), (True, False), (True, True)])
def test_document_is_valid_openapi(auth_required, protect_metrics):
    doc = build_openapi(MODEL, IngressLimits(), MAX_MODEL_LEN, 512, auth_required=auth_required,
                        protect_metrics=protect_metrics)
    validate_openapi(doc)
    orjson.dumps(doc)  # serialisable as it is (no tuples, sets or NaN)
    paths = doc["paths"]
    assert set(paths) == {"/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/metrics",
                          "/openapi.json", "/tokenize", "/detokenize"}
    for path in ("/tokenize", "/detokenize"):
        assert set(paths[path]["post"]["responses"]) >= {"200", "400", "401", "404", "413", "503"}
    for path in ("/v1/completions", "/v1/chat/completions"):
        responses = paths[path]["post"]["responses"]
        assert set(responses) >= {"200", "400", "401", "404", "413", "503"}
        assert set(responses["200"]["content"]) == {"application/json", "text/event-stream"}
    assert set(paths["/health"]["get"]["responses"]) == {"200", "503"}
    assert ("security" in doc) == auth_required
    if auth_required:
        assert paths["/health"]["get"]["security"] == []
        assert ("security" in paths["/metrics"]["get"]) == (not protect_metrics)


def test_limits_and_model_flow_into_the_schema():
    limits = IngressLimits(max_tokens_cap=64, max_stop_strings=3, max_logprobs=5, max_prompt_chars=77)
    doc = build_openapi("my-model", limits, 512, 300)
    comp = doc["components"]["schemas"]["CompletionRequest"]["properties"]
    assert comp["model"]["enum"] == ["my-model", None]
    assert comp["max_tokens"]["maximum"] == 64
    assert comp["logprobs"]["maximum"] == 5
    assert comp["prompt"]["oneOf"][0]["maxLength"] == 77
    assert comp["prompt"]["oneOf"][1]["items"]["maximum"] == 299
    assert comp["stop"]["anyOf"][2]["maxItems"] == 3
    uncapped = build_openapi("m", IngressLimits(), 512, 300)["components"]["schemas"]
    assert uncapped["ChatCompletionRequest"]["properties"]["max_tokens"]["maximum"] == 511


# ---- request bodies: good ones pass both -----------------------------------------------------------

GOOD_COMPLETIONS = [
    {"prompt": "Once upon a time"},
    {"prompt": "héllo 😀", "model": MODEL, "max_tokens": 7, "temperature": 0, "stream": True,
     "stream_options": {"include_usage": True}, "stop": ["."], "ignore_eos": False, "seed": 0, "logprobs": 2},
    {"prompt": [1, 2, 999, 0]},
    {"prompt": [[4, 5]]},
    {"prompt": ["just one"]},
    {"prompt": ["a", "batch", "of texts"], "n": 2},
    {"prompt": [[4, 5], [6], [999, 0]], "stream": True},
    {"prompt": "x", "max_tokens": None, "min_tokens": 16},
    {"prompt": "x", "max_tokens": 100, "min_tokens": 100},
    {"prompt": "x", "top_p": 1e-9, "top_k": -1, "min_p": 1, "repetition_penalty": 2, "presence_penalty": -2,
     "frequency_penalty": 2.0, "temperature": 2},
    {"prompt": "x", "seed": 2**64 - 1, "priority": -(2**63), "cache_salt": "s" * 1024},
    {"prompt": "x", "stop": "a", "stop_token_ids": [0, 999], "skip_special_tokens": False,
     "include_stop_str_in_output": True, "n": 1},
    {"prompt": "x", "n": 16, "seed": 2**64 - 1, "stream": True},
    {"prompt": "x", "logit_bias": {"0": -100, "7": 2.5, "99": 100}, "prompt_logprobs": 20, "echo": True,
     "logprobs": 0},
    {"prompt": "x", "echo": True, "logprobs": 3, "stream": True, "prompt_logprobs": None},
    {"prompt": "x", "best_of": 1, "echo": False, "suffix": "", "logit_bias": {}, "tools": [],
     "tool_choice": "none", "functions": [], "function_call": "none", "response_format": {"type": "text"},
     "modalities": ["text"], "use_beam_search": False, "allowed_token_ids": [], "bad_words": [],
     "logits_processors": [], "audio": None, "guided_json": None},
    {"prompt": "x", "unknown_field": {"anything": [1, 2]}, "user": "me"},
    {"prompt": "x", "stream": False, "stream_options": None, "logprobs": None, "temperature": None},
]

GOOD_CHATS = [
    {"messages": [USER]},
    {"messages": [{"role": "system", "content": "be brief"}, USER, {"role": "assistant", "content": None},
                  {"role": "developer", "content": ""}, {"role": "tool", "content": "42", "tool_call_id": "c1"}]},
    {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]},
    {"messages": [{"role": "user", "content": []}]},
    {"messages": [{"role": "assistant"}]},
    {"messages": [{"role": "user", "content": "x", "name": "bob", "tool_calls": [], "function_call": None}]},
    {"messages": [USER], "max_completion_tokens": 5, "max_tokens": 9, "min_tokens": 3},
    {"messages": [USER], "logprobs": True, "top_logprobs": 20},
    {"messages": [USER], "logprobs": True},
    {"messages": [USER], "n": 3, "logprobs": True, "n_unknown": 1},
    {"messages": [USER], "logprobs": False, "top_logprobs": None},
    {"messages": [USER], "logit_bias": {"5": 1}, "prompt_logprobs": 0, "echo": False, "stream": False},
    {"messages": [USER], "add_generation_prompt": False, "chat_template_kwargs": {"enable_thinking": False}},
    {"messages": [USER], "continue_final_message": False, "documents": [], "chat_template": None},
    {"messages": [USER], "stream": True, "stream_options": {}, "model": MODEL},
    {"messages": [USER], "min_tokens": 10**6},  # no max_tokens: the window decides, nothing to compare
]


@pytest.mark.parametrize("body", GOOD_COMPLETIONS)
def test_good_completion_bodies_pass_schema_and_parser(body):
    limits = IngressLimits()
    comp, _ = validators(limits)
    comp.validate(body)
    assert accepted(parse_completion_request, body, limits)


@pytest.mark.parametrize("body", GOOD_CHATS)
def test_good_chat_bodies_pass_schema_and_parser(body):
    limits = IngressLimits()
    _, chat = validators(limits)
    chat.validate(body)
    assert accepted(parse_chat_request, body, limits)


# ---- request bodies: the ingress tests' bad ones fail both ------------------------------------------

def _load(name: str):
    if str(REQUEST_TESTS) not in sys.path:  # their helper modules (endpoint_parsers), as pytest would
        sys.path.append(str(REQUEST_TESTS))
    spec = importlib.util.spec_from_file_location(f"_ingress_{name}", REQUEST_TESTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _walk(value):
    yield value
    if isinstance(value, dict):
        for item in value.values():
            yield from _walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from _walk(item)


def known_gap(body: dict, limits: IngressLimits) -> str | None:
    """Why JSON Schema cannot refuse this body although ingress does (None: it must refuse it)."""
    for value in _walk(body):
        if type(value) is float and not math.isfinite(value):
            return "NaN/Infinity are not JSON"
        if type(value) is float and value.is_integer():
            return "JSON Schema counts 3.0 as an integer; ingress wants 3"
    if body.get("min_tokens") is not None and (
        body.get("max_tokens") is not None or body.get("max_completion_tokens") is not None
    ):
        return "min_tokens <= max_tokens compares two fields"
    prompt = body.get("prompt")
    if type(prompt) is list and prompt and type(prompt[0]) in (str, list) and all(type(p) is type(prompt[0])
                                                                                    for p in prompt):
        lengths = [len(p) for p in prompt]
        if sum(lengths) > limits.max_prompt_chars >= max(lengths):
            return "the character limit is over all the prompts of a batch together"
    gap = _tools_gap(body, limits)
    if gap is not None:
        return gap
    if any(body.get(key) is not None for key in STRUCTURED_KEYS) and body.get("response_format") != {"type": "text"}:
        return "whether a schema, regex or grammar compiles (and only one is given) is the compiler's check"
    messages = body.get("messages")
    if type(messages) is list:
        lengths = [len(m["content"]) for m in messages if type(m) is dict and type(m.get("content")) is str]
        if sum(lengths) > limits.max_prompt_chars >= max(lengths, default=0):
            return "the character limit is over all messages together"
    return None


def _tools_gap(body: dict, limits: IngressLimits) -> str | None:
    """The tool rules JSON Schema cannot state (protocol/tool_calls/fields.py)."""
    tools = body.get("tools")
    if type(tools) is not list:
        return None
    if len(json.dumps(tools, separators=(",", ":"))) > limits.max_prompt_chars:
        return "the tools' JSON size counts against the character limit"
    names = [t["function"].get("name") for t in tools if type(t) is dict and type(t.get("function")) is dict]
    if len(names) != len(set(map(str, names))):
        return "tool names must be unique"
    choice = body.get("tool_choice")
    if type(choice) is dict and type(choice.get("function")) is dict and choice["function"].get("name") not in names:
        return "a named tool_choice must name one of the tools"
    if any(_depth(t) > MAX_SCHEMA_DEPTH for t in tools):
        return "a tool's parameters nest too deep"
    return None


def _depth(value) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


def _bad_cases():
    cases = []
    comp = _load("test_completion_request")
    cases += [("completions", comp.LIMITS, body) for body, _, _ in comp.BAD]
    chat = _load("test_chat_request")
    cases += [("chat", chat.LIMITS, body) for body, _, _ in chat.BAD]
    sampling = _load("test_sampling_fields")
    for fields, _ in sampling.BAD:
        cases.append(("completions", sampling.LIMITS, {"prompt": "hi", **fields}))
        cases.append(("chat", sampling.LIMITS, {"messages": [USER], **fields}))
    common = _load("test_common_fields")
    for key, value in common.UNSUPPORTED:
        cases.append(("completions", common.LIMITS, {"prompt": "hi", key: value}))
        cases.append(("chat", common.LIMITS, {"messages": [USER], key: value}))
    for key, value in common.COMPLETION_ONLY_UNSUPPORTED:
        cases.append(("completions", common.LIMITS, {"prompt": "hi", key: value}))
    extra = [
        {"n": 17}, {"n": 0}, {"n": 2.0}, {"stream_options": {"include_usage": True}},
        {"stream": False, "stream_options": {}}, {"stream": True, "stream_options": {"include_usage": 1}},
        {"stream": "yes"}, {"model": 5}, {"priority": 2**63}, {"cache_salt": ""}, {"cache_salt": "s" * 1025},
        {"top_k": 2**64}, {"min_tokens": -1},
        {"logit_bias": {"1000": 1}}, {"logit_bias": {"-1": 1}}, {"logit_bias": {"5": 100.5}}, {"logit_bias": []},
        {"logit_bias": {"5": "1"}}, {"logit_bias": {"5": 1, "05": 1}}, {"prompt_logprobs": 21},
        {"prompt_logprobs": -1}, {"prompt_logprobs": 1, "stream": True}, {"echo": "yes"},
    ]
    for fields in extra:
        cases.append(("completions", IngressLimits(), {"prompt": "hi", **fields}))
        cases.append(("chat", IngressLimits(), {"messages": [USER], **fields}))
    return cases


BAD_CASES = _bad_cases()


def test_the_ingress_bad_lists_were_found():
    assert len(BAD_CASES) > 200


@pytest.mark.parametrize("endpoint, limits, body", BAD_CASES,
                         ids=[f"{i}-{e}" for i, (e, _, _) in enumerate(BAD_CASES)])
def test_bad_bodies_fail_schema_and_parser(endpoint, limits, body):
    comp, chat = validators(limits)
    schema, parse = (comp, parse_completion_request) if endpoint == "completions" else (chat, parse_chat_request)
    model = body.get("model")
    if type(model) is str:  # the route refuses another model with 404, after parsing
        assert model != MODEL
    else:
        assert not accepted(parse, body, limits), body
    if known_gap(body, limits) is None:  # a gap's body may pass the schema (it need not)
        assert not schema.is_valid(body), body


# ---- /tokenize and /detokenize: good bodies pass both, the ingress tests' bad ones fail both -------

def _parse_tokenize(obj: dict, limits: IngressLimits, vocab: int):
    return parse_tokenize_request(obj, limits)


GOOD_TOKENIZE = [
    {"prompt": "héllo"}, {"prompt": ""}, {"prompt": "x", "add_special_tokens": False, "model": MODEL},
    {"prompt": "x", "messages": None, "return_token_strs": False, "add_generation_prompt": "ignored here"},
    {"messages": [USER]}, {"messages": [USER], "prompt": None, "add_generation_prompt": False,
                           "add_special_tokens": True, "chat_template_kwargs": {"enable_thinking": True}},
    {"messages": [USER], "continue_final_message": False, "tools": [], "chat_template": None, "unknown": 1},
]
GOOD_DETOKENIZE = [{"tokens": []}, {"tokens": [0, 999]}, {"tokens": [5], "model": MODEL, "other": "x"}]


def test_good_tokenize_bodies_pass_schema_and_parser():
    limits = IngressLimits()
    tok, detok = tokenize_validators(limits)
    for body in GOOD_TOKENIZE:
        tok.validate(body)
        assert accepted(_parse_tokenize, body, limits), body
    for body in GOOD_DETOKENIZE:
        detok.validate(body)
        assert accepted(parse_detokenize_request, body, limits), body


def test_bad_tokenize_bodies_fail_schema_and_parser():
    module = _load("test_tokenize_request")
    tok, detok = tokenize_validators(module.LIMITS, module.VOCAB)
    for body, _, _ in module.BAD_TOKENIZE:
        assert not accepted(_parse_tokenize, body, module.LIMITS, module.VOCAB), body
        if known_gap(body, module.LIMITS) is None:
            assert not tok.is_valid(body), body
    cases = [{}, {"tokens": "hi"}, {"tokens": [1, module.VOCAB]}, {"tokens": [-1]}, {"tokens": [True]},
             {"tokens": [[1]]}, {"tokens": [1] * 51}, {"tokens": [1], "model": []}]
    for body in cases:
        assert not accepted(parse_detokenize_request, body, module.LIMITS, module.VOCAB), body
        assert not detok.is_valid(body), body


def test_tokenize_answers_match_their_schemas():
    doc = build_openapi(MODEL, IngressLimits(), MAX_MODEL_LEN, VOCAB)
    validator(doc, "TokenizeResponse").validate({"count": 2, "max_model_len": 8, "tokens": [0, 5],
                                                 "token_strs": None})
    validator(doc, "DetokenizeResponse").validate({"prompt": "<s>hi"})
    assert not validator(doc, "TokenizeResponse").is_valid({"count": 2, "tokens": [0, 5]})


# ---- responses the emitter builds match the response schemas -----------------------------------------

def _outputs(with_logprobs: bool) -> list[RequestOutput]:
    lp = [TokenLogprob("he", 5, -0.5, [("he", 5, -0.5), ("ha", 6, -1.0)])] if with_logprobs else None
    return [
        RequestOutput("r", "he", [5], logprobs=lp, num_prompt_tokens=3, num_output_tokens=1),
        RequestOutput("r", "llo", [7], finish_reason="length", logprobs=lp, num_prompt_tokens=3,
                      num_output_tokens=2, num_cached_tokens=1),
    ]


@pytest.mark.parametrize("with_logprobs", [False, True])
def test_emitter_bodies_match_response_schemas(with_logprobs):
    doc = build_openapi(MODEL, IngressLimits(), MAX_MODEL_LEN, VOCAB)
    meta = ResponseMeta("cmpl-1", 1700000000, MODEL)
    acc = ResponseAccumulator()
    for out in _outputs(with_logprobs):
        acc.add(out)
    validator(doc, "Completion").validate(orjson.loads(acc.completion_body(meta)))
    validator(doc, "ChatCompletion").validate(orjson.loads(acc.chat_body(meta)))
    for include_usage in (False, True):
        comp, chat = CompletionChunker(meta, include_usage), ChatChunker(meta, include_usage)
        validator(doc, "ChatCompletionChunk").validate(orjson.loads(chat.role_chunk()))
        for out in _outputs(with_logprobs):
            validator(doc, "CompletionChunk").validate(orjson.loads(comp.chunk(out)))
            validator(doc, "ChatCompletionChunk").validate(orjson.loads(chat.chunk(out)))
        validator(doc, "CompletionChunk").validate(orjson.loads(comp.usage_chunk(out)))
        validator(doc, "ChatCompletionChunk").validate(orjson.loads(chat.usage_chunk(out)))
    error = validator(doc, "Error")
    for err in (bad_request("x", "prompt"), unauthorized(), payload_too_large(10, 5), overloaded(1.5)):
        error.validate(orjson.loads(err.to_body()))
    assert not error.is_valid({"error": {"message": "x"}})
    assert not validator(doc, "Completion").is_valid({"object": "text_completion"})


def test_echo_and_prompt_logprobs_bodies_match_response_schemas():
    doc = build_openapi(MODEL, IngressLimits(), MAX_MODEL_LEN, VOCAB)
    meta = ResponseMeta("cmpl-1", 1700000000, MODEL)
    scores = PromptScores("<s>", 0, [TokenLogprob("h", 107, -3.5, [("a", 100, -0.5)], rank=9)])
    acc = ResponseAccumulator()
    outs = _outputs(True)
    outs[0].prompt_logprobs = scores
    for out in outs:
        acc.add(out)
    body = orjson.loads(completion_body(meta, [acc], [Echo("h", 1)]))
    assert body["choices"][0]["logprobs"]["token_logprobs"][0] is None and body["choices"][0]["prompt_logprobs"]
    validator(doc, "Completion").validate(body)
    chat = orjson.loads(acc.chat_body(meta))
    assert chat["prompt_logprobs"][1]["107"]["rank"] == 9
    validator(doc, "ChatCompletion").validate(chat)
    chunker = CompletionChunker(meta, echo=Echo("h", 1))
    for out in outs:
        validator(doc, "CompletionChunk").validate(orjson.loads(chunker.chunk(out)))
    assert not validator(doc, "Completion").is_valid({**body, "choices": [{**body["choices"][0],
                                                                          "prompt_logprobs": [{"5": {"logprob": 1}}]}]})


# ---- schemathesis' generators against the ingress stage, in process ----------------------------------

def _stage(limits: IngressLimits) -> IngressStage:
    return IngressStage(DummyTokenizer(512), ChatTemplate(DUMMY_CHAT_TEMPLATE), limits, MAX_MODEL_LEN,
                        offload_chars=10**9, num_threads=1)


_PREPARE = {
    "/v1/completions": lambda stage, raw: stage.prepare_completion(raw, RequestTrace("r")),
    "/v1/chat/completions": lambda stage, raw: stage.prepare_chat(raw, RequestTrace("r")),
    "/tokenize": lambda stage, raw: _tokenize(stage, raw),
    "/detokenize": lambda stage, raw: _detokenize(stage, raw),
}
_REQUEST_SCHEMAS = {"/v1/completions": "CompletionRequest", "/v1/chat/completions": "ChatCompletionRequest",
                    "/tokenize": "TokenizeRequest", "/detokenize": "DetokenizeRequest"}


async def _tokenize(stage: IngressStage, raw: bytes):
    req = stage.parse_tokenize(raw)
    await stage.tokenize(req)
    return req


async def _detokenize(stage: IngressStage, raw: bytes):
    req = stage.parse_detokenize(raw)
    await stage.detokenize(req)
    return req


def _verdict(stage: IngressStage, path: str, raw: bytes) -> str:
    """What the server would answer (before the engine): 'ok', or the refusal's message."""
    try:
        prepared = asyncio.run(_PREPARE[path](stage, raw))
    except ApiError as err:
        assert 400 <= err.status < 500, err
        return err.message
    model = getattr(prepared, "api", prepared).model
    if model is not None and model != MODEL:
        return "404 model not found"
    return "ok"


@pytest.mark.parametrize("path", list(_PREPARE))
def test_generated_bodies_agree_with_ingress(path):
    schemathesis = pytest.importorskip("schemathesis")
    from hypothesis import HealthCheck, given, settings
    from schemathesis.generation import GenerationMode

    limits = IngressLimits()
    doc = build_openapi(MODEL, limits, MAX_MODEL_LEN, 512)
    schema_check = validator(doc, _REQUEST_SCHEMAS[path])
    operation = schemathesis.openapi.from_dict(doc)[path]["POST"]
    stage = _stage(limits)
    mismatches: list[tuple[str, object, str]] = []
    counts = {"valid": 0, "invalid": 0}

    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
        @settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy(generation_mode=mode))
        def run(case):
            body = case.body
            if isinstance(body, (bytes, str)) or not isinstance(body, dict):
                return  # not an object: parse_json_body's 400, covered by tests/protocol/test_json_body.py
            try:  # as schemathesis sends it, but a lone surrogate cannot be UTF-8 at all: skip those
                raw = json.dumps(body, ensure_ascii=False).encode("utf-8")
            except UnicodeEncodeError:
                return
            valid = schema_check.is_valid(body)
            verdict = _verdict(stage, path, raw)
            counts["valid" if valid else "invalid"] += 1
            if valid and verdict != "ok" and known_gap(body, limits) is None and "context length" not in verdict:
                mismatches.append(("schema-valid but refused", body, verdict))
            if not valid and verdict == "ok":
                mismatches.append(("schema-invalid but accepted", body, verdict))

        run()
    assert counts["valid"] > 10 and counts["invalid"] > 5, counts  # not vacuous
    assert not mismatches, mismatches[:3]
