"""The Tokenizer interface every model source provides (GGUF, HF directory, dummy).

Byte-level first: `token_bytes(id)` gives the exact bytes a token stands for, so the emitter can
detokenize incrementally without ever splitting a multi-byte character.
"""
from __future__ import annotations

from typing import Mapping, Protocol, Sequence


class Tokenizer(Protocol):
    vocab_size: int
    bos_token_id: int | None
    eos_token_ids: frozenset[int]  # any of these ends a reply (eos, eot, generation_config's list)
    add_bos: bool  # whether encode(..., add_special_tokens=True) prepends BOS
    chat_template: str | None
    special_tokens: Mapping[str, int]  # each special (control) token's text -> its id

    def encode(self, text: str, add_special_tokens: bool = True, parse_special: bool = True) -> list[int]:
        """Text to ids. Special-token strings in `text` are parsed as special tokens, unless
        `parse_special` is off: then they are text like any other."""
        ...

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str: ...

    def token_bytes(self, token_id: int) -> bytes:
        """The raw bytes of one token; for a special token, its text encoded as UTF-8."""
        ...

    def is_special(self, token_id: int) -> bool: ...
