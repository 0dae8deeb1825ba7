"""The request schemas in one import: what the ingress stage and the HTTP layer use.

The rules live in small modules: field_checks (typed getters), sampling_fields (SamplingParams),
common_fields (unsupported parameters, n, streaming), completion_schema, chat_schema, context_length.
"""
from __future__ import annotations

from ingress.chat_schema import ChatCompletionRequest, parse_chat_request
from ingress.completion_schema import CompletionRequest, parse_completion_request
from ingress.context_length import check_context_length

__all__ = [
    "ChatCompletionRequest",
    "CompletionRequest",
    "check_context_length",
    "parse_chat_request",
    "parse_completion_request",
]
