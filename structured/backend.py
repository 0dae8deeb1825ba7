"""The grammar backend interface: what the rest of ttft knows of a grammar engine.

    backend.compile(kind, spec) -> CompiledGrammar     raises GrammarError when the spec is invalid
    compiled.matcher() -> GrammarMatcher               one per request (and per choice of n > 1)
    matcher.fill_bitmask(bitmask, row)                 the next token's allowed ids as bits of row `row`
    matcher.accept(token_id) -> bool                   consume a sampled token (False: not allowed)
    matcher.is_finished()                              only EOS may follow
    matcher.rollback(num_tokens)                       forget the last tokens (a rejected draft)

The bitmask is an int32 tensor [rows, ceil(vocab / 32)] on the host: bit j of word w allows token
32 * w + j. A backend is compiled against one tokenizer (its own bridge, built once).
"""
from __future__ import annotations

from typing import Protocol

import torch


class GrammarError(ValueError):
    """A spec the backend cannot compile: the message says what is wrong (a 400 for the client)."""


class GrammarMatcher(Protocol):
    def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None: ...

    def accept(self, token_id: int) -> bool: ...

    def is_finished(self) -> bool: ...

    def rollback(self, num_tokens: int) -> None: ...


class CompiledGrammar(Protocol):
    def matcher(self) -> GrammarMatcher: ...


class GrammarBackend(Protocol):
    name: str

    def compile(self, kind: str, spec: str) -> CompiledGrammar: ...


def bitmask_words(vocab_size: int) -> int:
    """int32 words per bitmask row."""
    return -(-vocab_size // 32)
