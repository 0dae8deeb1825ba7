"""parse_chat_request: messages, max_completion_tokens, logprobs, template options."""
from __future__ import annotations

import pytest

from protocol.errors import ApiError
from protocol.limits import IngressLimits
from protocol.requests.chat import ChatCompletionRequest, parse_chat_request
from stages.sampling import SamplingParams

VOCAB = 1000
LIMITS = IngressLimits(max_prompt_chars=100, max_messages=8)
USER = {"role": "user", "content": "hi"}


def _parse(obj: dict, limits: IngressLimits = LIMITS) -> ChatCompletionRequest:
    return parse_chat_request(obj, limits, VOCAB)


BAD = [
    # (body, param, fragment of the message)
    ({}, "messages", "required"),
    ({"messages": None}, "messages", "required"),
    ({"messages": []}, "messages", "empty"),
    ({"messages": "hi"}, "messages", "an array"),
    ({"messages": {"role": "user"}}, "messages", "an array"),
    ({"messages": [USER] * 9}, "messages", "limit is 8"),
    ({"messages": [USER, 1]}, "messages[1]", "a message object"),
    ({"messages": [USER, None]}, "messages[1]", "a message object"),
    ({"messages": [{"content": "x"}]}, "messages[0].role", "got nothing"),
    ({"messages": [{"role": "bot", "content": "x"}]}, "messages[0].role", "must be one of"),
    ({"messages": [{"role": "User", "content": "x"}]}, "messages[0].role", "must be one of"),
    ({"messages": [{"role": "function", "content": "x"}]}, "messages[0].role", "must be one of"),
    ({"messages": [{"role": 5, "content": "x"}]}, "messages[0].role", "must be one of"),
    ({"messages": [{"role": "user"}]}, "messages[0].content", "required"),
    ({"messages": [{"role": "user", "content": None}]}, "messages[0].content", "required"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content", "a string or an array"),
    ({"messages": [{"role": "user", "content": {"text": "x"}}]}, "messages[0].content", "a string or"),
    ({"messages": [{"role": "user", "content": ["x"]}]}, "messages[0].content[0]", "content part"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}]},
     "messages[0].content[0].type", "only 'text'"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "input_audio"}]}]},
     "messages[0].content[1].type", "only 'text'"),
    ({"messages": [{"role": "user", "content": [{"text": "x"}]}]}, "messages[0].content[0].type", "a string"),
    ({"messages": [{"role": "user", "content": [{"type": "text"}]}]}, "messages[0].content[0].text", "a string"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": 3}]}]},
     "messages[0].content[0].text", "a string"),
    ({"messages": [{"role": "user", "content": "x", "name": 5}]}, "messages[0].name", "a string"),
    ({"messages": [USER, {"role": "assistant", "content": None,
                          "tool_calls": [{"id": "c", "type": "function"}]}]},
     "messages[1].tool_calls[0].function", "an object"),
    ({"messages": [{"role": "user", "content": "x", "tool_calls": [
        {"id": "c", "function": {"name": "f", "arguments": "{}"}}]}]}, "messages[0].tool_calls", "only allowed"),
    ({"messages": [USER, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "function": {"name": "f", "arguments": {"a": 1}}}]}]},
     "messages[1].tool_calls[0].function.arguments", "a string of JSON"),
    ({"messages": [USER, {"role": "assistant", "content": None, "tool_calls": [
        {"id": 7, "function": {"name": "f", "arguments": "{}"}}]}]}, "messages[1].tool_calls[0].id", "a string"),
    ({"messages": [USER, {"role": "assistant", "content": None, "tool_calls": {"id": "c"}}]},
     "messages[1].tool_calls", "an array"),
    ({"messages": [{"role": "assistant", "content": "", "function_call": {"name": "f"}}]},
     "messages[0].function_call", "not supported"),
    ({"messages": [{"role": "user", "content": "x" * 101}]}, "messages", "too long"),
    ({"messages": [{"role": "user", "content": "x" * 60}, {"role": "user", "content": "x" * 41}]},
     "messages", "too long"),
    ({"messages": [USER], "max_tokens": 0}, "max_tokens", "at least 1"),
    ({"messages": [USER], "max_tokens": True}, "max_tokens", "integer"),
    ({"messages": [USER], "max_completion_tokens": 0}, "max_completion_tokens", "at least 1"),
    ({"messages": [USER], "max_completion_tokens": 8.0}, "max_completion_tokens", "integer"),
    ({"messages": [USER], "max_completion_tokens": 5, "max_tokens": "x"}, "max_tokens", "integer"),
    ({"messages": [USER], "max_completion_tokens": 5, "min_tokens": 6}, "min_tokens", "must not exceed"),
    ({"messages": [USER], "logprobs": 1}, "logprobs", "a boolean"),
    ({"messages": [USER], "logprobs": "true"}, "logprobs", "a boolean"),
    ({"messages": [USER], "top_logprobs": 3}, "top_logprobs", "requires 'logprobs'"),
    ({"messages": [USER], "logprobs": False, "top_logprobs": 0}, "top_logprobs", "requires 'logprobs'"),
    ({"messages": [USER], "logprobs": True, "top_logprobs": 21}, "top_logprobs", "between 0 and 20"),
    ({"messages": [USER], "logprobs": True, "top_logprobs": -1}, "top_logprobs", "between 0 and 20"),
    ({"messages": [USER], "logprobs": True, "top_logprobs": True}, "top_logprobs", "integer"),
    ({"messages": [USER], "add_generation_prompt": "yes"}, "add_generation_prompt", "a boolean"),
    ({"messages": [USER], "chat_template_kwargs": "x"}, "chat_template_kwargs", "an object"),
    ({"messages": [USER], "chat_template_kwargs": {"messages": []}}, "chat_template_kwargs.messages",
     "cannot be set"),
    ({"messages": [USER], "chat_template_kwargs": {"add_generation_prompt": False}},
     "chat_template_kwargs.add_generation_prompt", "cannot be set"),
    ({"messages": [USER], "continue_final_message": True}, "continue_final_message", "not supported"),
    ({"messages": [USER], "chat_template": "{{ 7*7 }}"}, "chat_template", "not supported"),
    ({"messages": [USER], "documents": [{"text": "d"}]}, "documents", "not supported"),
]


@pytest.mark.parametrize("body, param, fragment", BAD, ids=[f"{i}-{p}" for i, (_, p, _) in enumerate(BAD)])
def test_bad_bodies(body, param, fragment):
    with pytest.raises(ApiError) as info:
        _parse(body)
    err = info.value
    assert (err.status, err.param) == (400, param)
    assert fragment in err.message


def test_defaults():
    req = _parse({"messages": [USER]})
    assert req == ChatCompletionRequest(
        model=None, messages=[{"role": "user", "content": "hi"}], params=SamplingParams(), max_tokens=None,
        stream=False, include_usage=False, add_generation_prompt=True, chat_template_kwargs={},
    )


@pytest.mark.parametrize("fields, expected", [
    ({}, None),
    ({"max_tokens": 10}, 10),
    ({"max_completion_tokens": 12}, 12),
    ({"max_completion_tokens": 12, "max_tokens": 10}, 12),
    ({"max_completion_tokens": None, "max_tokens": 10}, 10),
])
def test_max_completion_tokens_is_preferred(fields, expected):
    req = _parse({"messages": [USER], **fields})
    assert req.max_tokens == expected
    if expected is not None:
        assert req.params.max_tokens == expected


@pytest.mark.parametrize("fields, expected", [
    ({}, None),
    ({"logprobs": False}, None),
    ({"logprobs": True}, 0),
    ({"logprobs": True, "top_logprobs": 0}, 0),
    ({"logprobs": True, "top_logprobs": 5}, 5),
    ({"logprobs": True, "top_logprobs": None}, 0),
    ({"logprobs": None, "top_logprobs": None}, None),
])
def test_logprobs(fields, expected):
    assert _parse({"messages": [USER], **fields}).params.logprobs == expected


def test_messages_are_normalized_for_the_template():
    req = _parse({"messages": [
        {"role": "developer", "content": "be brief"},
        {"role": "system", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "user", "content": "hi", "name": "ann", "extra_key": {"x": 1}},
        {"role": "assistant", "content": None},
        {"role": "assistant", "content": "", "tool_calls": []},
        {"role": "tool", "content": "42", "tool_call_id": "call_1"},
        {"role": "user", "content": []},
    ]})
    assert req.messages == [
        {"role": "system", "content": "be brief"},
        {"role": "system", "content": "a\nb"},
        {"role": "user", "content": "hi", "name": "ann"},
        {"role": "assistant", "content": ""},
        {"role": "assistant", "content": ""},
        {"role": "tool", "content": "42", "tool_call_id": "call_1"},
        {"role": "user", "content": ""},
    ]


def test_template_options():
    req = _parse({"messages": [USER], "add_generation_prompt": False,
                  "chat_template_kwargs": {"enable_thinking": False}})
    assert req.add_generation_prompt is False
    assert req.chat_template_kwargs == {"enable_thinking": False}
    assert _parse({"messages": [USER], "chat_template_kwargs": None}).chat_template_kwargs == {}


def test_character_limit_counts_all_messages_and_allows_exactly_the_limit():
    req = _parse({"messages": [{"role": "user", "content": "x" * 60}, {"role": "user", "content": "y" * 40}]})
    assert len(req.messages) == 2


def test_a_typical_openai_client_request():
    req = _parse({
        "model": "smollm2", "messages": [{"role": "system", "content": "You are helpful."}, USER],
        "max_completion_tokens": 64, "temperature": 0.7, "top_p": 0.95, "stream": True,
        "stream_options": {"include_usage": True}, "seed": 7, "stop": ["\n\n"], "n": 1, "user": "u",
    }, IngressLimits())
    assert req.model == "smollm2" and req.stream and req.include_usage and req.max_tokens == 64
    assert req.params == SamplingParams(max_tokens=64, temperature=0.7, top_p=0.95, seed=7, stop=("\n\n",))
