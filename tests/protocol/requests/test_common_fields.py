"""Request-level rules of both endpoints: unsupported parameters, n, streaming options, model,
priority, cache_salt."""
from __future__ import annotations

import pytest
from endpoint_parsers import ENDPOINTS, LIMITS, chat, completion

from protocol.errors import ApiError
from protocol.limits import IngressLimits

UNSUPPORTED = [
    ("best_of", 2), ("best_of", True), ("best_of", 1.0),
    ("suffix", "tail"), ("functions", [{"name": "f"}]),
    ("function_call", "auto"), ("response_format", {"type": "json_object"}),
    ("response_format", {"type": "json_schema", "json_schema": {}}), ("modalities", ["text", "audio"]),
    ("audio", {"voice": "x"}), ("use_beam_search", True), ("guided_json", {}),
    ("guided_regex", "a+"), ("guided_choice", ["a"]), ("guided_grammar", "g"),
    ("structured_outputs", {"json": {}}), ("allowed_token_ids", [1]), ("bad_words", ["x"]),
    ("logits_processors", ["p"]), ("truncate_prompt_tokens", 10),
]


@ENDPOINTS
@pytest.mark.parametrize("key, value", UNSUPPORTED)
def test_unsupported_parameters_are_refused_not_ignored(parse, key, value):
    with pytest.raises(ApiError) as info:
        parse({key: value})
    err = info.value
    assert (err.status, err.param, err.code) == (400, key, "unsupported_parameter")
    assert f"'{key}' is not supported" in err.message


# Tools are a chat feature (tests/protocol/tool_calls/): completions refuses them.
COMPLETION_ONLY_UNSUPPORTED = [("tools", [{"type": "function"}]), ("tool_choice", "auto"),
                               ("tool_choice", {"type": "function"})]


@pytest.mark.parametrize("key, value", COMPLETION_ONLY_UNSUPPORTED)
def test_tools_are_refused_on_completions(key, value):
    with pytest.raises(ApiError) as info:
        completion({key: value})
    assert (info.value.param, info.value.code) == (key, "unsupported_parameter")
    assert "/v1/chat/completions" in info.value.message


@pytest.mark.parametrize("value", [True, "yes"])
def test_echo_is_refused_on_chat_only(value):
    with pytest.raises(ApiError) as info:
        chat({"echo": value})
    assert (info.value.param, info.value.code) == ("echo", "unsupported_parameter")
    assert chat({"echo": False}) == chat({})


@ENDPOINTS
@pytest.mark.parametrize("key, value", [
    ("best_of", 1), ("echo", False), ("suffix", ""), ("logit_bias", {}), ("tools", []),
    ("tool_choice", "none"), ("functions", []), ("function_call", "none"),
    ("response_format", {"type": "text"}), ("modalities", ["text"]), ("use_beam_search", False),
    ("allowed_token_ids", []), ("bad_words", []), ("logits_processors", []), ("n", 1),
])
def test_inert_values_of_unsupported_parameters_are_accepted(parse, key, value):
    assert parse({key: value}) == parse({})


@ENDPOINTS
def test_unknown_fields_are_ignored(parse):
    fields = {"user": "u1", "metadata": {"a": "b"}, "store": False, "x_custom": [1, {"y": None}],
              "service_tier": "auto", "parallel_tool_calls": False, "prediction": {"type": "content"}}
    assert parse(fields) == parse({})


@ENDPOINTS
@pytest.mark.parametrize("n, fragment", [(17, "at most 16"), (128, "at most 16"), (0, "at least 1"),
                                         (-1, "at least 1"), (True, "integer"), (1.0, "integer"),
                                         ("1", "integer")])
def test_n(parse, n, fragment):
    with pytest.raises(ApiError) as info:
        parse({"n": n})
    assert info.value.param == "n" and fragment in info.value.message


@ENDPOINTS
def test_n_is_read_up_to_max_n(parse):
    assert parse({}).n == parse({"n": None}).n == 1
    assert parse({"n": 16}).n == 16
    assert parse({"n": 4}, IngressLimits(max_n=4)).n == 4
    with pytest.raises(ApiError) as info:
        parse({"n": 5}, IngressLimits(max_n=4))
    assert (info.value.status, info.value.param) == (400, "n") and "at most 4" in info.value.message


def test_max_n_below_one_is_a_configuration_error():
    with pytest.raises(ValueError, match="max_n"):
        IngressLimits(max_n=0)


@ENDPOINTS
@pytest.mark.parametrize("fields, param", [
    ({"stream_options": {"include_usage": True}}, "stream_options"),
    ({"stream": False, "stream_options": {"include_usage": True}}, "stream_options"),
    ({"stream": False, "stream_options": {}}, "stream_options"),
    ({"stream": True, "stream_options": []}, "stream_options"),
    ({"stream": True, "stream_options": "usage"}, "stream_options"),
    ({"stream": True, "stream_options": {"include_usage": "yes"}}, "stream_options.include_usage"),
    ({"stream": True, "stream_options": {"include_usage": 1}}, "stream_options.include_usage"),
    ({"stream": "true"}, "stream"),
    ({"stream": 1}, "stream"),
    ({"model": 5}, "model"),
    ({"model": ["m"]}, "model"),
    ({"priority": 1.5}, "priority"),
    ({"priority": True}, "priority"),
    ({"priority": 2**63}, "priority"),
    ({"cache_salt": ""}, "cache_salt"),
    ({"cache_salt": 5}, "cache_salt"),
    ({"cache_salt": "s" * 1025}, "cache_salt"),
])
def test_bad_request_level_fields(parse, fields, param):
    with pytest.raises(ApiError) as info:
        parse(fields)
    assert info.value.status == 400 and info.value.param == param


@ENDPOINTS
def test_streaming_and_usage(parse):
    assert (parse({}).stream, parse({}).include_usage) == (False, False)
    req = parse({"stream": True})
    assert (req.stream, req.include_usage) == (True, False)
    req = parse({"stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
    assert (req.stream, req.include_usage) == (True, True)
    req = parse({"stream": True, "stream_options": {"include_usage": None}})
    assert req.include_usage is False


@ENDPOINTS
def test_model_priority_and_salt_are_exposed(parse):
    req = parse({"model": "smollm2", "priority": -3, "cache_salt": "tenant-a"})
    assert (req.model, req.priority, req.cache_salt) == ("smollm2", -3, "tenant-a")
    assert (parse({}).model, parse({}).priority, parse({}).cache_salt) == (None, 0, None)
