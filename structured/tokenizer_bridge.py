"""llguidance's tokenizer from ttft's (ingress/tokenizer.py): every model source's tokenizer, the
GGUF-loaded SmolLM2 one included, gives each id's exact bytes, which is what llguidance's token
trie is built from; its encoder (text, no special tokens) is what llguidance tokenizes forced text
with. `vocab_size` is the model's (the logits' width), which may exceed the tokenizer's: ids past
the tokenizer's stand for no text and are never allowed.

Building one reads the whole vocabulary (~0.1 s at 49K ids) and its first mask builds llguidance's
per-tokenizer tables (~0.4 s): `warm` does that once, before any request waits for it.
"""
from __future__ import annotations

from typing import Sequence

import llguidance

from ingress.tokenizer import Tokenizer
from structured.llguidance_masks import allocate_bitmask, fill_row


class TokenizerWrapper:
    """The duck type llguidance.LLTokenizer accepts (llguidance's own TokenizerWrapper's fields)."""

    def __init__(self, tokenizer: Tokenizer, vocab_size: int) -> None:
        self.is_tokenizer_wrapper = True
        self._tokenizer = tokenizer
        self.eos_token_id = min(tokenizer.eos_token_ids) if tokenizer.eos_token_ids else None
        self.bos_token_id = tokenizer.bos_token_id
        n = tokenizer.vocab_size
        # Ids the model has and the tokenizer lacks (padded embedding tables) stand for no text:
        # special tokens of their own, which no grammar allows.
        self.tokens: Sequence[bytes] = [tokenizer.token_bytes(i) for i in range(n)] + [
            b"<|ttft_unused_%d|>" % i for i in range(n, vocab_size)]
        self.special_token_ids = [i for i in range(n) if tokenizer.is_special(i)] + list(range(n, vocab_size))

    def __call__(self, text: str | bytes) -> list[int]:
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        return self._tokenizer.encode(text, add_special_tokens=False, parse_special=False)


def ll_tokenizer(tokenizer: Tokenizer, vocab_size: int | None = None) -> llguidance.LLTokenizer:
    """llguidance's view of `tokenizer`; every eos id ends a constrained output."""
    eos = sorted(tokenizer.eos_token_ids)
    vocab_size = max(vocab_size or 0, tokenizer.vocab_size)
    return llguidance.LLTokenizer(TokenizerWrapper(tokenizer, vocab_size), n_vocab=vocab_size, eos_token=eos or None)


def warm(tokenizer: llguidance.LLTokenizer) -> None:
    """Build llguidance's per-tokenizer tables with one mask of a trivial grammar."""
    matcher = llguidance.LLMatcher(tokenizer, llguidance.LLMatcher.grammar_from_regex("a"), log_level=0)
    bitmask = allocate_bitmask(1, tokenizer.vocab_size)
    fill_row(matcher, bitmask, 0)
