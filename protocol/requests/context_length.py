"""The context-window check, after tokenizing: prompt plus completion must fit max_model_len."""
from __future__ import annotations

from protocol.errors import bad_request, context_length_exceeded


def check_context_length(
    num_prompt_tokens: int,
    max_tokens: int | None,
    max_model_len: int,
    *,
    max_tokens_cap: int | None = None,
    prompt_param: str = "messages",
) -> int:
    """The effective max_tokens: `max_tokens` itself, or (None) the rest of the window, at most
    `max_tokens_cap`. Raises 400 `context_length_exceeded` when the prompt leaves no room for one
    token, or when prompt plus an explicit max_tokens is over the window (vLLM's wording)."""
    if num_prompt_tokens < 1:
        raise bad_request(f"The {_noun(prompt_param)} is empty after tokenization.", prompt_param)
    remaining = max_model_len - num_prompt_tokens
    if max_tokens is None:
        if remaining < 1:
            raise context_length_exceeded(
                f"This model's maximum context length is {max_model_len} tokens. However, your "
                f"{_noun(prompt_param)} has {num_prompt_tokens} tokens, which leaves no room for a "
                f"completion. Please reduce the length of the {_noun(prompt_param)}.",
                prompt_param,
            )
        return remaining if max_tokens_cap is None else min(remaining, max_tokens_cap)
    if max_tokens > remaining:
        raise context_length_exceeded(
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{num_prompt_tokens + max_tokens} tokens ({num_prompt_tokens} in the {_noun(prompt_param)}, "
            f"{max_tokens} in the completion). Please reduce the length of the {_noun(prompt_param)} "
            "or completion.",
            prompt_param,
        )
    return max_tokens


def _noun(prompt_param: str) -> str:
    return "messages" if prompt_param == "messages" else "prompt"
