"""parse_tokenize_request / parse_detokenize_request: vLLM's fields and defaults; each bad body a 400
naming the field."""
from __future__ import annotations

import pytest

from protocol.errors import ApiError
from protocol.limits import IngressLimits
from protocol.requests.tokenize import (
    DetokenizeRequest,
    TokenizeRequest,
    parse_detokenize_request,
    parse_tokenize_request,
)

VOCAB = 1000
LIMITS = IngressLimits(max_prompt_chars=50, max_messages=3)
USER = {"role": "user", "content": "hi"}
WEATHER = {"type": "function", "function": {"name": "w"}}  # its JSON within LIMITS' 50 characters


def test_prompt_defaults_add_special_tokens_and_messages_do_not():
    assert parse_tokenize_request({"prompt": "hi"}, LIMITS) == TokenizeRequest(None, "hi", None, True)
    assert parse_tokenize_request({"prompt": "", "add_special_tokens": False, "model": "m"}, LIMITS) == \
        TokenizeRequest("m", "", None, False)
    req = parse_tokenize_request({"messages": [USER, {"role": "developer", "content": "x"}]}, LIMITS)
    assert req.messages == [USER, {"role": "system", "content": "x"}] and req.prompt is None
    assert (req.add_special_tokens, req.add_generation_prompt, req.chat_template_kwargs) == (False, True, {})
    req = parse_tokenize_request({"messages": [USER], "add_generation_prompt": False, "add_special_tokens": True,
                                  "chat_template_kwargs": {"enable_thinking": False},
                                  "return_token_strs": False, "unknown": 1}, LIMITS)
    assert (req.add_special_tokens, req.add_generation_prompt) == (True, False)
    assert req.chat_template_kwargs == {"enable_thinking": False}


def test_messages_take_tools_and_tool_choice_as_chat_completions_reads_them():
    req = parse_tokenize_request({"messages": [USER], "tools": [WEATHER], "tool_choice": "required"}, LIMITS)
    assert req.tools.choice == "required" and [f.name for f in req.tools.functions] == ["w"]
    named = {"type": "function", "function": {"name": "w"}}
    assert parse_tokenize_request({"messages": [USER], "tools": [WEATHER], "tool_choice": named},
                                  LIMITS).tools.named == "w"
    auto = parse_tokenize_request({"messages": [USER], "tools": [WEATHER]}, IngressLimits(enable_auto_tool_choice=True))
    assert auto.tools.choice == "auto"
    for empty in ({"tools": []}, {"tools": None}, {"tool_choice": "none"}, {}):
        assert parse_tokenize_request({"messages": [USER], **empty}, LIMITS).tools is None
    assert parse_tokenize_request({"prompt": "x", "tools": [], "tool_choice": None}, LIMITS).tools is None


BAD_TOKENIZE = [
    ({}, "prompt", "'prompt' (a text) or 'messages' (a chat) is required"),
    ({"prompt": "a", "messages": [USER]}, "prompt", "not both"),
    ({"prompt": 5}, "prompt", "must be a string"),
    ({"prompt": [1, 2]}, "prompt", "must be a string"),
    ({"prompt": "x" * 51}, "prompt", "too long"),
    ({"prompt": "x", "add_special_tokens": 1}, "add_special_tokens", "a boolean"),
    ({"prompt": "x", "model": 3}, "model", "a string"),
    ({"prompt": "x", "return_token_strs": True}, "return_token_strs", "not supported"),
    ({"messages": [USER], "continue_final_message": True}, "continue_final_message", "not supported"),
    ({"messages": [USER], "chat_template": "{{ x }}"}, "chat_template", "not supported"),
    ({"messages": [USER], "tools": [{"type": "function"}], "tool_choice": "required"}, "tools[0].function",
     "an object with a 'name'"),
    ({"messages": [USER], "tools": [WEATHER, WEATHER], "tool_choice": "required"}, "tools[1].function.name", "twice"),
    ({"messages": [USER], "tools": WEATHER, "tool_choice": "required"}, "tools", "an array"),
    ({"messages": [USER], "tools": [WEATHER]}, "tool_choice", "--enable-auto-tool-choice"),  # auto, as on chat
    ({"messages": [USER], "tool_choice": "required"}, "tool_choice", "no 'tools'"),
    ({"messages": [USER], "tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "x"}}},
     "tool_choice.function.name", "not one of the request's tools"),
    ({"messages": [USER], "tools": [{"function": {"name": "w", "description": "x" * 40}}], "tool_choice": "required"},
     "tools", "too long"),  # counted with the prompt's characters, as on chat
    ({"prompt": "x", "tools": [WEATHER]}, "tools", "with a 'prompt'"),
    ({"prompt": "x", "tool_choice": "none"}, "tool_choice", "with a 'prompt'"),
    ({"messages": []}, "messages", "must not be empty"),
    ({"messages": "hi"}, "messages", "an array"),
    ({"messages": [USER] * 4}, "messages", "the limit is 3"),
    ({"messages": [{"role": "bot", "content": "x"}]}, "messages[0].role", "must be one of"),
    ({"messages": [{"role": "user", "content": "x" * 51}]}, "messages", "too long"),
    ({"messages": [USER], "add_generation_prompt": "yes"}, "add_generation_prompt", "a boolean"),
    ({"messages": [USER], "chat_template_kwargs": {"messages": []}}, "chat_template_kwargs.messages", "cannot be set"),
]


@pytest.mark.parametrize("body, param, fragment", BAD_TOKENIZE, ids=[f"{i}-{p}" for i, (_, p, _) in
                                                                     enumerate(BAD_TOKENIZE)])
def test_bad_tokenize_bodies(body, param, fragment):
    with pytest.raises(ApiError) as info:
        parse_tokenize_request(body, LIMITS)
    assert (info.value.status, info.value.param) == (400, param)
    assert fragment in info.value.message


def test_detokenize():
    assert parse_detokenize_request({"tokens": [0, 5, 999]}, LIMITS, VOCAB) == DetokenizeRequest(None, [0, 5, 999])
    assert parse_detokenize_request({"tokens": [], "model": "m"}, LIMITS, VOCAB) == DetokenizeRequest("m", [])


@pytest.mark.parametrize("body, param, fragment", [
    ({}, "tokens", "required"),
    ({"tokens": "hi"}, "tokens", "an array of token ids"),
    ({"tokens": [1, VOCAB]}, "tokens[1]", "not a token id"),
    ({"tokens": [-1]}, "tokens[0]", "not a token id"),
    ({"tokens": [1, True]}, "tokens[1]", "an integer token id"),
    ({"tokens": [1.0]}, "tokens[0]", "an integer token id"),
    ({"tokens": [[1]]}, "tokens[0]", "an integer token id"),
    ({"tokens": [1] * 51}, "tokens", "too long"),
    ({"tokens": [1], "model": []}, "model", "a string"),
])
def test_bad_detokenize_bodies(body, param, fragment):
    with pytest.raises(ApiError) as info:
        parse_detokenize_request(body, LIMITS, VOCAB)
    assert (info.value.status, info.value.param) == (400, param)
    assert fragment in info.value.message


@pytest.mark.parametrize("limits, bound, flag", [
    (IngressLimits(max_prompt_chars=50, max_detokenize_tokens=20), 20, "--max-detokenize-tokens"),
    (IngressLimits(max_prompt_chars=50, max_detokenize_tokens=80), 50, "--max-prompt-chars"),
])
def test_detokenize_takes_at_most_the_smaller_cap_and_names_its_flag(limits, bound, flag):
    assert len(parse_detokenize_request({"tokens": [1] * bound}, limits, VOCAB).tokens) == bound
    with pytest.raises(ApiError) as info:
        parse_detokenize_request({"tokens": [1] * (bound + 1)}, limits, VOCAB)
    assert info.value.param == "tokens" and f"the limit is {bound} ({flag})" in info.value.message


def test_max_detokenize_tokens_must_be_positive():
    with pytest.raises(ValueError, match="max_detokenize_tokens"):
        IngressLimits(max_detokenize_tokens=0)
