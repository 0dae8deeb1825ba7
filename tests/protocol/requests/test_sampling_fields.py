"""The generation options both endpoints share: each bad value is a 400 naming the field, on both
endpoints; good values land in SamplingParams exactly."""
from __future__ import annotations

import pytest

from protocol.errors import ApiError
from protocol.limits import IngressLimits
from protocol.requests.chat import parse_chat_request
from protocol.requests.completion import parse_completion_request
from stages.sampling import SamplingParams

VOCAB = 1000
LIMITS = IngressLimits(max_tokens_cap=4096)


def _completion(fields: dict):
    return parse_completion_request({"prompt": "hi", **fields}, LIMITS, VOCAB)


def _chat(fields: dict):
    return parse_chat_request({"messages": [{"role": "user", "content": "hi"}], **fields}, LIMITS, VOCAB)


ENDPOINTS = pytest.mark.parametrize("parse", [_completion, _chat], ids=["completions", "chat"])

BAD = [
    # (fields, param)
    ({"temperature": -0.1}, "temperature"),
    ({"temperature": 2.01}, "temperature"),
    ({"temperature": "1"}, "temperature"),
    ({"temperature": True}, "temperature"),
    ({"temperature": [1]}, "temperature"),
    ({"temperature": float("nan")}, "temperature"),
    ({"temperature": float("inf")}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"top_p": 0.0}, "top_p"),
    ({"top_p": -0.5}, "top_p"),
    ({"top_p": 1.0001}, "top_p"),
    ({"top_p": False}, "top_p"),
    ({"top_k": -2}, "top_k"),
    ({"top_k": 1.5}, "top_k"),
    ({"top_k": 5.0}, "top_k"),
    ({"top_k": True}, "top_k"),
    ({"top_k": "5"}, "top_k"),
    ({"min_p": -0.01}, "min_p"),
    ({"min_p": 1.01}, "min_p"),
    ({"presence_penalty": 2.5}, "presence_penalty"),
    ({"presence_penalty": -2.01}, "presence_penalty"),
    ({"frequency_penalty": 3}, "frequency_penalty"),
    ({"frequency_penalty": "0"}, "frequency_penalty"),
    ({"repetition_penalty": 0}, "repetition_penalty"),
    ({"repetition_penalty": -1.0}, "repetition_penalty"),
    ({"repetition_penalty": 2.5}, "repetition_penalty"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": -1}, "max_tokens"),
    ({"max_tokens": True}, "max_tokens"),
    ({"max_tokens": 3.0}, "max_tokens"),
    ({"max_tokens": "16"}, "max_tokens"),
    ({"max_tokens": 4097}, "max_tokens"),
    ({"max_tokens": float(2**70)}, "max_tokens"),  # what orjson makes of a 70-bit integer
    ({"seed": 1.5}, "seed"),
    ({"seed": True}, "seed"),
    ({"seed": "1"}, "seed"),
    ({"seed": 2**64}, "seed"),
    ({"seed": -(2**63) - 1}, "seed"),
    ({"stop": ""}, "stop"),
    ({"stop": [""]}, "stop[0]"),
    ({"stop": ["a", 1]}, "stop[1]"),
    ({"stop": ["a", None]}, "stop[1]"),
    ({"stop": 5}, "stop"),
    ({"stop": {"a": 1}}, "stop"),
    ({"stop": [str(i) for i in range(17)]}, "stop"),
    ({"stop": "a" * 1001}, "stop"),
    ({"stop": ["ok", "a" * 1001]}, "stop[1]"),
    ({"stop_token_ids": [-1]}, "stop_token_ids[0]"),
    ({"stop_token_ids": [1, VOCAB]}, "stop_token_ids[1]"),
    ({"stop_token_ids": [1, True]}, "stop_token_ids[1]"),
    ({"stop_token_ids": [1.0]}, "stop_token_ids[0]"),
    ({"stop_token_ids": "1"}, "stop_token_ids"),
    ({"stop_token_ids": list(range(257))}, "stop_token_ids"),
    ({"ignore_eos": "yes"}, "ignore_eos"),
    ({"ignore_eos": 1}, "ignore_eos"),
    ({"skip_special_tokens": 0}, "skip_special_tokens"),
    ({"include_stop_str_in_output": "true"}, "include_stop_str_in_output"),
    ({"min_tokens": -1}, "min_tokens"),
    ({"min_tokens": 1.0}, "min_tokens"),
    ({"min_tokens": 20, "max_tokens": 10}, "min_tokens"),
]


@ENDPOINTS
@pytest.mark.parametrize("fields, param", BAD, ids=[f"{p}-{i}" for i, (_, p) in enumerate(BAD)])
def test_bad_values_are_400_naming_the_field(parse, fields, param):
    with pytest.raises(ApiError) as info:
        parse(fields)
    err = info.value
    assert err.status == 400 and err.type == "invalid_request_error"
    assert err.param == param
    assert f"'{param}'" in err.message


@ENDPOINTS
def test_every_field_lands_in_sampling_params(parse):
    req = parse({
        "max_tokens": 100, "temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05,
        "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1, "seed": 1234,
        "stop": ["\n\n", "END", "\n\n"], "stop_token_ids": [7, 3, 7], "ignore_eos": True,
        "skip_special_tokens": False, "include_stop_str_in_output": True, "min_tokens": 5,
    })
    assert req.max_tokens == 100
    expected = dict(
        max_tokens=100, temperature=0.7, top_p=0.9, top_k=40, min_p=0.05, presence_penalty=0.5,
        frequency_penalty=-0.5, repetition_penalty=1.1, seed=1234, stop=("\n\n", "END"),
        stop_token_ids=(7, 3), ignore_eos=True, skip_special_tokens=False,
        include_stop_str_in_output=True, min_tokens=5,
    )
    assert req.params == SamplingParams(**expected, logprobs=req.params.logprobs)


@ENDPOINTS
@pytest.mark.parametrize("top_k, expected", [(-1, None), (0, None), (1, 1), (999, 999), (1000, None),
                                             (10**9, None)])
def test_top_k_disabled_or_whole_vocabulary_is_none(parse, top_k, expected):
    assert parse({"top_k": top_k}).params.top_k == expected


@ENDPOINTS
@pytest.mark.parametrize("temperature, expected", [(0, 0.0), (1e-7, 0.0), (1e-5, 1e-5), (1, 1.0),
                                                   (2, 2.0)])
def test_temperature_ints_accepted_and_tiny_means_greedy(parse, temperature, expected):
    params = parse({"temperature": temperature}).params
    assert params.temperature == expected and type(params.temperature) is float
    assert params.greedy == (expected == 0.0)


@ENDPOINTS
def test_bounds_are_inclusive_where_documented(parse):
    params = parse({"top_p": 1, "min_p": 1, "presence_penalty": -2, "frequency_penalty": 2,
                    "repetition_penalty": 2, "max_tokens": 4096, "min_tokens": 4096,
                    "stop": ["x" * 1000] + [str(i) for i in range(15)]}).params
    assert params.top_p == 1.0 and params.min_p == 1.0 and params.repetition_penalty == 2.0
    assert params.max_tokens == 4096 and params.min_tokens == 4096 and len(params.stop) == 16


@ENDPOINTS
@pytest.mark.parametrize("seed", [0, -(2**63), 2**64 - 1])
def test_any_64_bit_seed(parse, seed):
    assert parse({"seed": seed}).params.seed == seed


@ENDPOINTS
def test_single_stop_string(parse):
    assert parse({"stop": "###"}).params.stop == ("###",)
    assert parse({"stop": []}).params.stop == ()
    assert parse({"stop_token_ids": []}).params.stop_token_ids == ()


@ENDPOINTS
def test_null_counts_as_absent(parse):
    fields = ["temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
              "repetition_penalty", "seed", "stop", "stop_token_ids", "ignore_eos", "skip_special_tokens",
              "include_stop_str_in_output", "min_tokens", "max_tokens", "logprobs", "n", "stream",
              "stream_options", "priority", "cache_salt", "model", "best_of", "echo", "suffix",
              "logit_bias", "tools", "tool_choice", "response_format", "user", "prompt_logprobs"]
    assert parse({name: None for name in fields}) == parse({})


def test_cap_none_allows_any_max_tokens():
    req = parse_completion_request({"prompt": "x", "max_tokens": 10**6}, IngressLimits(), VOCAB)
    assert req.max_tokens == 10**6 and req.params.max_tokens == 10**6


def test_custom_temperature_cap():
    limits = IngressLimits(max_temperature=5.0)
    assert parse_completion_request({"prompt": "x", "temperature": 4.5}, limits, VOCAB).params.temperature == 4.5
