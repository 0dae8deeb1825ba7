"""Shared set-up of the structured room's tests: one llguidance backend over the dummy byte
tokenizer (built once per session: cheap, and every id's bytes are known), and the live server
fixtures (tests/live_server.py)."""
from __future__ import annotations

import pytest

from ingress.dummy_tokenizer import DummyTokenizer
from live_server import launch, start_server  # noqa: F401
from structured.llguidance_backend import LlguidanceBackend
from structured.tokenizer_bridge import ll_tokenizer, warm

VOCAB = 512


@pytest.fixture(scope="session")
def dummy_tokenizer() -> DummyTokenizer:
    return DummyTokenizer(VOCAB)


@pytest.fixture(scope="session")
def backend(dummy_tokenizer) -> LlguidanceBackend:
    ll = ll_tokenizer(dummy_tokenizer, VOCAB)
    warm(ll)
    return LlguidanceBackend(ll)
