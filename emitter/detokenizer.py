"""Incremental detokenization on token bytes.

A byte-level BPE token is a run of bytes, not of characters: an emoji or a CJK character is often
split over two or three tokens. Decoding each token on its own would send U+FFFD for each half;
re-decoding the whole reply at every step would cost O(length) per token. Instead the token bytes
feed one incremental UTF-8 decoder, which emits a character only once all its bytes are there and
keeps at most 3 pending bytes between pushes: O(new tokens) per push.

Invalid byte sequences become U+FFFD exactly as in Hugging Face's byte-level decoder (Rust's
`String::from_utf8_lossy` and CPython's `errors="replace"` both replace each maximal invalid
subpart by one U+FFFD), so the concatenation of all pushes plus `finish()` equals
`tokenizer.decode(all_ids, skip_special_tokens=...)`, minus the U+FFFD a one-shot decode would give
for an incomplete character left at the very end: that one is dropped, never sent.
"""
from __future__ import annotations

from codecs import utf_8_decode
from typing import Iterable
from weakref import WeakKeyDictionary

from ingress.tokenizer import Tokenizer

# Token id -> its text, for the tokens whose bytes are whole characters (most of them): what
# push_one returns for such a token whenever no partial character is pending, the same for every
# stream of one tokenizer. So the streams share one table per tokenizer and skip_special_tokens
# setting; it fills as tokens are first seen and holds at most the vocabulary.
_TEXTS: WeakKeyDictionary[Tokenizer, tuple[dict[int, str], dict[int, str]]] = WeakKeyDictionary()


def _text_table(tokenizer: Tokenizer, skip_special_tokens: bool) -> dict[int, str]:
    try:
        tables = _TEXTS.get(tokenizer)
        if tables is None:
            tables = _TEXTS[tokenizer] = ({}, {})
    except TypeError:  # a tokenizer that cannot be weakly referenced: a table for this stream only
        return {}
    return tables[skip_special_tokens]


class IncrementalDetokenizer:
    """Token ids in, newly completed text out. One per request; not thread-safe (one owner).

    The decoder is `codecs.utf_8_decode(data, "replace", final=False)` over the pending bytes plus
    the new ones: exactly what the codecs module's incremental UTF-8 decoder does, minus its
    Python-level wrapper (this runs once per token of every stream)."""

    __slots__ = ("_tokenizer", "_skip_special_tokens", "_pending", "_finished", "_texts")

    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = True) -> None:
        self._tokenizer = tokenizer
        self._skip_special_tokens = skip_special_tokens
        self._pending = b""  # the first bytes of a character still incomplete (0 to 3)
        self._finished = False
        self._texts = _text_table(tokenizer, skip_special_tokens)

    def push(self, token_ids: Iterable[int]) -> str:
        """The text completed by these tokens (may be "" while a character is still partial)."""
        assert not self._finished, "push after finish"
        tok = self._tokenizer
        skip = self._skip_special_tokens
        data = b"".join(
            tok.token_bytes(t) for t in token_ids if not (skip and tok.is_special(t))
        )
        return self._decode(data) if data else ""

    def push_one(self, token_id: int) -> str:
        """`push((token_id,))` without the generator: the per-token hot path."""
        assert not self._finished, "push after finish"
        pending = self._pending
        if not pending:
            text = self._texts.get(token_id)
            if text is not None:
                return text
        tok = self._tokenizer
        if self._skip_special_tokens and tok.is_special(token_id):
            return ""
        data = tok.token_bytes(token_id)
        if not data:
            return ""
        # _decode, inline (once per token of every stream).
        if pending:
            data = pending + data
        text, num_used = utf_8_decode(data, "replace", False)
        if num_used < len(data):
            self._pending = data[num_used:]
        else:
            self._pending = b""
            if not pending:  # the token alone is whole characters: this text, every time
                self._texts[token_id] = text
        return text

    def _decode(self, data: bytes) -> str:
        if self._pending:
            data = self._pending + data
        text, num_used = utf_8_decode(data, "replace", False)
        self._pending = data[num_used:] if num_used < len(data) else b""
        return text

    @property
    def num_pending_bytes(self) -> int:
        """Bytes of a character still waiting for its continuation bytes (0 to 3)."""
        return len(self._pending)

    def finish(self) -> str:
        """End of the reply: drop an incomplete trailing character (never sent as U+FFFD).

        Returns "" by construction: the decoder emits every decodable byte at once and only ever
        holds the prefix of a possibly valid character. It is a method so that callers need not
        know that, and so that the end is explicit.
        """
        self._finished = True
        self._pending = b""
        return ""
