"""Finish checks after a token is appended: why, if at all, a request ends here."""
from __future__ import annotations

from scheduler.request_state import RequestState


def finish_reason(req: RequestState, token_id: int, eos_token_ids: frozenset[int],
                  max_model_len: int) -> str | None:
    """"stop" for an end-of-sequence or stop token id, "length" for max_tokens or the context
    window, else None. A stop token wins over length when both hold: the model did end its reply.

    min_tokens: EOS and stop_token_ids end a reply only once `min_tokens` tokens precede them
    (the sampler masks them before that; if one slips through it is kept as an ordinary token).
    """
    params = req.params
    num_tokens = len(req.all_token_ids)  # (once per token per request: no property calls)
    num_output = num_tokens - req.num_prompt_tokens
    if num_output - 1 >= params.min_tokens:
        if params.stop_token_ids and token_id in params.stop_token_ids:
            return "stop"
        if not params.ignore_eos and token_id in eos_token_ids:
            return "stop"
    if num_output >= params.max_tokens or num_tokens >= max_model_len:
        return "length"
    return None
