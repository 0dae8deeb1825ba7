"""check_context_length: fills an absent max_tokens with the rest of the window, refuses overflow."""
from __future__ import annotations

import pytest

from protocol.requests.context_length import check_context_length
from protocol.errors import ApiError


def test_explicit_max_tokens_that_fits_is_kept():
    assert check_context_length(100, 50, 2048) == 50
    assert check_context_length(2000, 48, 2048) == 48  # exactly fills the window


def test_absent_max_tokens_fills_the_window():
    assert check_context_length(100, None, 2048) == 1948
    assert check_context_length(2047, None, 2048) == 1


def test_absent_max_tokens_respects_the_cap():
    assert check_context_length(100, None, 2048, max_tokens_cap=512) == 512
    assert check_context_length(2000, None, 2048, max_tokens_cap=512) == 48


def test_prompt_plus_completion_over_the_window_is_vllm_worded():
    with pytest.raises(ApiError) as info:
        check_context_length(2000, 100, 2048)
    err = info.value
    assert (err.status, err.code, err.param) == (400, "context_length_exceeded", "messages")
    assert err.message.startswith(
        "This model's maximum context length is 2048 tokens. However, you requested 2100 tokens "
        "(2000 in the messages, 100 in the completion)."
    )


@pytest.mark.parametrize("num_prompt_tokens, max_tokens", [(2048, None), (5000, None), (2048, 1), (3000, 16)])
def test_prompt_alone_too_long(num_prompt_tokens, max_tokens):
    with pytest.raises(ApiError) as info:
        check_context_length(num_prompt_tokens, max_tokens, 2048, prompt_param="prompt")
    err = info.value
    assert (err.status, err.code, err.param) == (400, "context_length_exceeded", "prompt")
    assert "maximum context length is 2048 tokens" in err.message and str(num_prompt_tokens) in err.message


def test_empty_prompt_after_tokenization():
    with pytest.raises(ApiError) as info:
        check_context_length(0, None, 2048, prompt_param="prompt")
    assert (info.value.status, info.value.param, info.value.code) == (400, "prompt", None)
