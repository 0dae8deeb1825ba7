"""Hypothesis: whatever a client sends, validation either returns a request whose params satisfy every
documented bound, or raises ApiError (400/413) with the OpenAI body shape. Nothing else escapes."""
from __future__ import annotations

import math

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.errors import ApiError
from protocol.json_body import parse_json_body
from protocol.limits import IngressLimits
from protocol.requests.chat import ChatCompletionRequest, parse_chat_request
from protocol.requests.completion import CompletionRequest, parse_completion_request

VOCAB = 500
LIMITS = IngressLimits(max_body_bytes=64 * 1024, max_prompt_chars=2000, max_tokens_cap=4096, max_batch_prompts=3)
FUZZ = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Any JSON value (plus what only an in-process caller could pass: NaN, inf, huge ints).
scalars = (st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats()
           | st.text(max_size=12) | st.sampled_from([0, 1, -1, 2, 16, 0.0, 1.0, 0.5, "", "text", "none"]))
json_values = st.recursive(
    scalars, lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children,
                                                                               max_size=4),
    max_leaves=12,
)

SAMPLING_FIELDS = [
    "temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty",
    "max_tokens", "max_completion_tokens", "seed", "stop", "stop_token_ids", "ignore_eos", "min_tokens",
    "skip_special_tokens", "include_stop_str_in_output", "logprobs", "top_logprobs", "n", "stream",
    "stream_options", "priority", "cache_salt", "model", "best_of", "echo", "suffix", "logit_bias", "tools",
    "tool_choice", "response_format", "add_generation_prompt", "chat_template_kwargs", "guided_json",
    "prompt_logprobs",
]
plausible = {
    "temperature": st.floats(-1, 3) | st.integers(-1, 3),
    "top_p": st.floats(-0.5, 1.5),
    "top_k": st.integers(-3, VOCAB + 2),
    "max_tokens": st.integers(-2, 5000),
    "min_tokens": st.integers(-2, 5000),
    "stop": st.lists(st.text(max_size=3), max_size=18) | st.text(max_size=3),
    "stop_token_ids": st.lists(st.integers(-2, VOCAB + 2), max_size=5),
    "logprobs": st.booleans() | st.integers(-1, 22),
    "top_logprobs": st.integers(-1, 22),
    "prompt_logprobs": st.integers(-1, 22),
    "echo": st.booleans(),
    "logit_bias": st.dictionaries(st.sampled_from(["0", "5", "05", str(VOCAB - 1), str(VOCAB), "-1", "+3", " 7",
                                                   "x", "\u0663"]),
                                  st.floats(-120, 120) | st.integers(-101, 101) | json_values, max_size=4),
    "stream_options": st.fixed_dictionaries({}, optional={"include_usage": st.booleans() | st.none()}),
}
prompts = (json_values | st.text(max_size=30) | st.lists(st.integers(-2, VOCAB + 2), max_size=8)
           | st.lists(st.text(max_size=5), max_size=4) | st.lists(st.lists(st.integers(0, VOCAB), max_size=3),
                                                                  max_size=4)
           | st.lists(st.text(max_size=900) | st.lists(st.integers(0, VOCAB), max_size=900), max_size=4))
part = st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url", 3]) | json_values},
                             optional={"text": st.text(max_size=10) | json_values})
message = st.fixed_dictionaries(
    {}, optional={"role": st.sampled_from(["system", "user", "assistant", "developer", "tool", "bot"]) | json_values,
                  "content": st.text(max_size=20) | st.lists(part, max_size=3) | json_values,
                  "name": st.text(max_size=5) | json_values, "tool_calls": json_values})
valid_message = st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant"]),
                                       "content": st.text(max_size=20)})
messages = st.lists(valid_message, min_size=1, max_size=3) | st.lists(valid_message | message, max_size=4) | json_values


@st.composite
def request_bodies(draw, main_key: str, main: st.SearchStrategy) -> dict:
    body = {}
    if draw(st.integers(0, 9)):
        body[main_key] = draw(main)
    for key in draw(st.lists(st.sampled_from(SAMPLING_FIELDS), max_size=5, unique=True)):
        body[key] = draw(plausible[key] if key in plausible and draw(st.booleans()) else json_values)
    return body


def _check_error(err: ApiError) -> None:
    assert err.status in (400, 413)
    body = orjson.loads(err.to_body())["error"]
    assert set(body) == {"message", "type", "param", "code"}
    assert body["message"] and len(body["message"]) < 600
    assert body["param"] is None or type(body["param"]) is str


def _check_params(req: CompletionRequest | ChatCompletionRequest) -> None:
    p = req.params
    assert 0.0 <= p.temperature <= LIMITS.max_temperature and math.isfinite(p.temperature)
    assert 0.0 < p.top_p <= 1.0 and 0.0 <= p.min_p <= 1.0
    assert p.top_k is None or 1 <= p.top_k < VOCAB
    assert -2 <= p.presence_penalty <= 2 and -2 <= p.frequency_penalty <= 2 and 0 < p.repetition_penalty <= 2
    assert 1 <= p.max_tokens <= 4096 and 0 <= p.min_tokens
    assert req.max_tokens is None or (req.max_tokens == p.max_tokens and p.min_tokens <= p.max_tokens)
    assert all(type(s) is str and s for s in p.stop) and len(p.stop) <= LIMITS.max_stop_strings
    assert all(type(t) is int and 0 <= t < VOCAB for t in p.stop_token_ids)
    assert p.logprobs is None or 0 <= p.logprobs <= LIMITS.max_logprobs
    assert p.seed is None or type(p.seed) is int
    assert p.prompt_logprobs is None or 0 <= p.prompt_logprobs <= LIMITS.max_logprobs
    assert p.prompt_logprobs is None or not (req.stream and p.prompt_logprobs != p.logprobs)
    ids = [t for t, _ in p.logit_bias]
    assert ids == sorted(set(ids)) and all(0 <= t < VOCAB for t in ids)
    assert all(type(b) is float and -100 <= b <= 100 for _, b in p.logit_bias)
    for flag in (p.ignore_eos, p.skip_special_tokens, p.include_stop_str_in_output, req.stream, req.include_usage):
        assert type(flag) is bool
    assert req.include_usage is False or req.stream is True


@FUZZ
@given(request_bodies("prompt", prompts))
def test_completion_bodies(body):
    try:
        req = parse_completion_request(body, LIMITS, VOCAB)
    except ApiError as err:
        _check_error(err)
        return
    _check_params(req)
    assert 1 <= len(req.prompts) <= LIMITS.max_batch_prompts and len({type(p) for p in req.prompts}) == 1
    assert sum(map(len, req.prompts)) <= 2000  # the batch shares the prompt limit
    for prompt in req.prompts:
        assert (type(prompt) is str and 0 < len(prompt)) or (
            type(prompt) is list and prompt and all(type(t) is int and 0 <= t < VOCAB for t in prompt))


@FUZZ
@given(request_bodies("messages", messages))
def test_chat_bodies(body):
    try:
        req = parse_chat_request(body, LIMITS, VOCAB)
    except ApiError as err:
        _check_error(err)
        return
    _check_params(req)
    assert req.messages and sum(len(m["content"]) for m in req.messages) <= 2000
    for m in req.messages:
        assert m["role"] in ("system", "user", "assistant", "tool") and type(m["content"]) is str


def _through_the_wire(body: bytes) -> None:
    try:
        obj = parse_json_body(body, LIMITS)
        parse_chat_request(obj, LIMITS, VOCAB)
        parse_completion_request(obj, LIMITS, VOCAB)
    except ApiError as err:
        _check_error(err)


@FUZZ
@given(st.binary(max_size=200))
def test_random_bytes(body):
    _through_the_wire(body)


@FUZZ
@given(request_bodies("messages", messages), st.data())
def test_truncated_and_corrupted_json(body, data):
    raw = orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS) if _serializable(body) else b"{}"
    cut = data.draw(st.integers(0, len(raw)))
    flip = data.draw(st.integers(0, max(0, len(raw) - 1)))
    corrupted = bytearray(raw[:cut])
    if corrupted and flip < len(corrupted):
        corrupted[flip] = data.draw(st.integers(0, 255))
    _through_the_wire(bytes(corrupted))


def _serializable(body: dict) -> bool:
    try:
        orjson.dumps(body)
        return True
    except (TypeError, orjson.JSONEncodeError):
        return False


@pytest.mark.parametrize("raw", [
    b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 1' + b"0" * 400 + b"}",
    b'{"messages": [{"role": "user", "content": "x"}], "seed": 99999999999999999999999}',
    b'{"messages": [{"role": "user", "content": "x"}], "temperature": 1e309}',
    b'{"messages": ' + b"[" * 1100 + b"]" * 1100 + b"}",
    b'{"messages": [{"role": "user", "content": "x"}], "stop": ' + b"[" * 500 + b"]" * 500 + b"}",
    b'{"messages": [{"role": "user", "content": "\\udfff"}]}',
])
def test_huge_numbers_and_deep_nesting_on_the_wire(raw):
    with pytest.raises(ApiError) as info:
        parse_chat_request(parse_json_body(raw, LIMITS), LIMITS, VOCAB)
    assert info.value.status == 400
    _check_error(info.value)
