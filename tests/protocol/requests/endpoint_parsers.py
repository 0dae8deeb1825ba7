"""Test support: both endpoints' parsers on a minimal body plus the fields under test."""
from __future__ import annotations

import pytest

from protocol.limits import IngressLimits
from protocol.requests.chat import parse_chat_request
from protocol.requests.completion import parse_completion_request

VOCAB = 1000
LIMITS = IngressLimits()


def completion(fields: dict, limits: IngressLimits = LIMITS):
    return parse_completion_request({"prompt": "hi", **fields}, limits, VOCAB)


def chat(fields: dict, limits: IngressLimits = LIMITS):
    return parse_chat_request({"messages": [{"role": "user", "content": "hi"}], **fields}, limits, VOCAB)


ENDPOINTS = pytest.mark.parametrize("parse", [completion, chat], ids=["completions", "chat"])
