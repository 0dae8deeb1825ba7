"""logit_bias, prompt_logprobs, echo and --max-logprobs on both endpoints: parsed values and 400s."""
from __future__ import annotations

import pytest
from endpoint_parsers import ENDPOINTS, LIMITS, chat, completion

from protocol.errors import ApiError
from protocol.limits import IngressLimits


def _error(parse, fields: dict, limits: IngressLimits = LIMITS) -> ApiError:
    with pytest.raises(ApiError) as info:
        parse(fields, limits)
    assert info.value.status == 400
    return info.value


@ENDPOINTS
def test_logit_bias_becomes_sorted_pairs(parse):
    params = parse({"logit_bias": {"7": 5, "3": -100, "999": 100.0, "0": 0.5}}).params
    assert params.logit_bias == ((0, 0.5), (3, -100.0), (7, 5.0), (999, 100.0))
    assert all(type(b) is float for _, b in params.logit_bias)
    assert parse({"logit_bias": {}}).params.logit_bias == parse({}).params.logit_bias == ()


@ENDPOINTS
@pytest.mark.parametrize("bias, param, fragment", [
    ({"1000": 1}, "logit_bias.1000", "out of the vocabulary"),
    ({"-1": 1}, "logit_bias.-1", "decimal integers"),
    ({"+3": 1}, "logit_bias.+3", "decimal integers"),
    ({" 3": 1}, "logit_bias. 3", "decimal integers"),
    ({"0x5": 1}, "logit_bias.0x5", "decimal integers"),
    ({"\u0663": 1}, "logit_bias.\u0663", "decimal integers"),  # a non-ASCII digit
    ({"": 1}, "logit_bias.", "decimal integers"),
    ({"5": 100.5}, "logit_bias.5", "between -100 and 100"),
    ({"5": -101}, "logit_bias.5", "between -100 and 100"),
    ({"5": "1"}, "logit_bias.5", "a number"),
    ({"5": True}, "logit_bias.5", "a number"),
    ({"5": 1, "05": 2}, "logit_bias.05", "twice"),
    ({"9" * 5000: 1}, "logit_bias." + "9" * 40, "out of the vocabulary"),
    ({"0000000000007": 1}, "logit_bias.0000000000007", "out of the vocabulary"),  # (many digits: not parsed)
])
def test_logit_bias_errors_name_the_key(parse, bias, param, fragment):
    err = _error(parse, {"logit_bias": bias})
    assert err.param == param and fragment in err.message, err


@ENDPOINTS
def test_logit_bias_type_and_entry_limit(parse):
    assert _error(parse, {"logit_bias": [1]}).param == "logit_bias"
    limits = IngressLimits(max_logit_bias=2)
    assert len(parse({"logit_bias": {"1": 1, "2": 2}}, limits).params.logit_bias) == 2
    err = _error(parse, {"logit_bias": {"1": 1, "2": 2, "3": 3}}, limits)
    assert err.param == "logit_bias" and "limit is 2" in err.message


@ENDPOINTS
def test_prompt_logprobs_bounded_by_max_logprobs(parse):
    assert parse({"prompt_logprobs": 0}).params.prompt_logprobs == 0
    assert parse({"prompt_logprobs": 20}).params.prompt_logprobs == 20
    assert parse({}).params.prompt_logprobs is None
    for bad in (21, -1, True, 1.0, "2"):
        assert _error(parse, {"prompt_logprobs": bad}).param == "prompt_logprobs"
    small = IngressLimits(max_logprobs=3)
    assert parse({"prompt_logprobs": 3}, small).params.prompt_logprobs == 3
    assert "between 0 and 3" in _error(parse, {"prompt_logprobs": 4}, small).message


@ENDPOINTS
def test_prompt_logprobs_refused_with_streaming(parse):
    err = _error(parse, {"prompt_logprobs": 1, "stream": True})
    assert err.param == "prompt_logprobs" and "stream" in err.message


def test_max_logprobs_bounds_logprobs_and_top_logprobs():
    small = IngressLimits(max_logprobs=2)
    assert completion({"logprobs": 2}, small).params.logprobs == 2
    assert _error(completion, {"logprobs": 3}, small).param == "logprobs"
    assert chat({"logprobs": True, "top_logprobs": 2}, small).params.logprobs == 2
    assert _error(chat, {"logprobs": True, "top_logprobs": 3}, small).param == "top_logprobs"
    with pytest.raises(ValueError):
        IngressLimits(max_logprobs=-1)


def test_echo_asks_for_the_prompt_logprobs_with_logprobs_only():
    assert completion({"echo": True}).echo is True
    assert completion({"echo": True}).params.prompt_logprobs is None
    assert completion({"echo": True, "logprobs": 3}).params.prompt_logprobs == 3
    assert completion({"echo": True, "logprobs": 3, "prompt_logprobs": 1}).params.prompt_logprobs == 1
    # Streaming echo with logprobs is allowed (vLLM too): only an explicit prompt_logprobs is not.
    assert completion({"echo": True, "logprobs": 0, "stream": True}).params.prompt_logprobs == 0
    assert completion({}).echo is False
    assert _error(completion, {"echo": "yes"}).param == "echo"
