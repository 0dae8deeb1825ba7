"""parse_completion_request: the prompt forms, logprobs, max_tokens default; each bad body a 400."""
from __future__ import annotations

import pytest

from protocol.errors import ApiError
from protocol.limits import IngressLimits
from protocol.requests.completion import CompletionRequest, parse_completion_request
from stages.sampling import SamplingParams

VOCAB = 1000
LIMITS = IngressLimits(max_prompt_chars=100, max_batch_prompts=4)


def _parse(obj: dict, limits: IngressLimits = LIMITS) -> CompletionRequest:
    return parse_completion_request(obj, limits, VOCAB)


BAD = [
    # (body, param, fragment of the message)
    ({}, "prompt", "required"),
    ({"prompt": None}, "prompt", "required"),
    ({"prompt": ""}, "prompt", "empty"),
    ({"prompt": []}, "prompt", "empty"),
    ({"prompt": [""]}, "prompt[0]", "empty"),
    ({"prompt": [[]]}, "prompt[0]", "empty"),
    ({"prompt": ["a", [1]]}, "prompt[1]", "must be a string"),
    ({"prompt": [[1], "a"]}, "prompt[1]", "an array of token ids"),
    ({"prompt": ["a", ""]}, "prompt[1]", "empty"),
    ({"prompt": [[1], []]}, "prompt[1]", "empty"),
    ({"prompt": [[1], [2, VOCAB]]}, "prompt[1][1]", "not a token id"),
    ({"prompt": ["a", None]}, "prompt[1]", "must be a string"),
    ({"prompt": ["x"] * 5}, "prompt", "at most 4 in one request"),
    ({"prompt": ["x" * 60, "y" * 41]}, "prompt[1]", "too long: 41 characters, the limit is 40 (what the batch"),
    ({"prompt": [[1] * 60, [2] * 41]}, "prompt[1]", "too long: 41 token ids, the limit is 40"),
    ({"prompt": [1, "a"]}, "prompt[1]", "integer"),
    ({"prompt": [1, True]}, "prompt[1]", "integer"),
    ({"prompt": [True]}, "prompt[0]", "a string, a token id"),
    ({"prompt": [1.0]}, "prompt[0]", "a string, a token id"),
    ({"prompt": [None]}, "prompt[0]", "a string, a token id"),
    ({"prompt": [{"a": 1}]}, "prompt[0]", "a string, a token id"),
    ({"prompt": [5, -1]}, "prompt[1]", "not a token id"),
    ({"prompt": [5, VOCAB]}, "prompt[1]", "not a token id"),
    ({"prompt": [[5, VOCAB + 7]]}, "prompt[0][1]", "not a token id"),
    ({"prompt": [[1, 2.5]]}, "prompt[0][1]", "integer"),
    ({"prompt": 5}, "prompt", "a string or an array"),
    ({"prompt": True}, "prompt", "a string or an array"),
    ({"prompt": {"text": "hi"}}, "prompt", "a string or an array"),
    ({"prompt": "x" * 101}, "prompt", "too long"),
    ({"prompt": ["x" * 101]}, "prompt[0]", "too long"),
    ({"prompt": list(range(101))}, "prompt", "too long"),
    ({"prompt": "hi", "logprobs": -1}, "logprobs", "between 0 and 20"),
    ({"prompt": "hi", "logprobs": 21}, "logprobs", "between 0 and 20"),
    ({"prompt": "hi", "logprobs": True}, "logprobs", "integer"),
    ({"prompt": "hi", "logprobs": 1.5}, "logprobs", "integer"),
    ({"prompt": "hi", "min_tokens": 17}, "min_tokens", "must not exceed max_tokens (16)"),
]


@pytest.mark.parametrize("body, param, fragment", BAD, ids=[f"{i}-{p}" for i, (_, p, _) in enumerate(BAD)])
def test_bad_bodies(body, param, fragment):
    with pytest.raises(ApiError) as info:
        _parse(body)
    err = info.value
    assert (err.status, err.param) == (400, param)
    assert fragment in err.message


def test_defaults_follow_openai():
    req = _parse({"prompt": "Once upon a time"})
    assert req == CompletionRequest(
        model=None, prompts=["Once upon a time"], params=SamplingParams(max_tokens=16), max_tokens=16,
        stream=False, include_usage=False,
    )


def test_default_max_tokens_respects_a_smaller_cap():
    req = _parse({"prompt": "x"}, IngressLimits(max_tokens_cap=8))
    assert req.max_tokens == 8 and req.params.max_tokens == 8


@pytest.mark.parametrize("prompt, expected", [
    ("héllo 😀 日本", "héllo 😀 日本"),
    (["just one"], "just one"),
    ([1, 2, 999, 0], [1, 2, 999, 0]),
    ([[4, 5]], [4, 5]),
    ("x" * 100, "x" * 100),
])
def test_prompt_forms(prompt, expected):
    req = _parse({"prompt": prompt})
    assert req.prompt == expected and req.prompts == [expected]


@pytest.mark.parametrize("prompt", [["a", "bc", "d"], [[1], [2, 3], [4]], ["x" * 50, "y" * 50], ["a"] * 4])
def test_a_batch_keeps_its_prompts_in_order(prompt):
    assert _parse({"prompt": prompt}).prompts == prompt


def test_max_batch_prompts_below_one_is_refused():
    with pytest.raises(ValueError, match="max_batch_prompts"):
        IngressLimits(max_batch_prompts=0)


@pytest.mark.parametrize("logprobs, expected", [(None, None), (0, 0), (5, 5), (20, 20)])
def test_logprobs(logprobs, expected):
    assert _parse({"prompt": "x", "logprobs": logprobs}).params.logprobs == expected


def test_a_typical_request():
    req = _parse({"model": "smollm2", "prompt": "The capital of France is", "max_tokens": 7,
                  "temperature": 0, "stream": True, "stream_options": {"include_usage": True},
                  "stop": ["."], "ignore_eos": False, "seed": 0, "logprobs": 2})
    assert req.model == "smollm2" and req.stream and req.include_usage
    assert req.params == SamplingParams(max_tokens=7, temperature=0.0, stop=(".",), seed=0, logprobs=2)
    assert req.params.greedy
