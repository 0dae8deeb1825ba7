"""AsciiPieceEncoder: the GPT-2 byte-level pipeline for ASCII text, piece by piece, with a cache.

The Rust `tokenizers` pipeline spends most of a prompt's encode on its general machinery, not on
BPE: alignment-tracking strings through the added-token split, the Digits and ByteLevel
pre-tokenizers (onig regex), then an `Encoding` with a string per token; ~1.4 ms of CPU for a
1,000-token English prompt, of which BPE (cached per word in the model) is little. For ASCII text
the same split is one `re.findall` (the classes \\p{L}, \\p{N}, \\s are exactly [A-Za-z], [0-9],
[\\t\\n\\v\\f\\r ] there; tests check every ASCII character against the Rust pipeline), and a
piece's ids depend on the piece alone (BPE never merges across pieces), so a dict of piece ->
ids answers nearly every piece of a prompt; a piece not in it goes through the Rust BPE model
itself (byte-level mapped, as the pipeline does). ~0.27 vs ~1.4 ms on the same prompts, same ids.

Text whose only whitespace is single spaces between words (no other whitespace, none at either
end: one line of prose) is split by `str.split(" ")`, ~4x cheaper than the regex: each piece of
these regexes then lies within one word plus the single space before it (letters, digits,
symbols and contractions all stop at a space, and that space is seen the same way alone, its
lookahead reading the word's first character), so the ids of " " + word are looked up per word
in a second cache (the first word: its own pieces). Other text takes the regex.

Only the two GPT-2-regex kinds (`gpt2`, and `digits`: each digit on its own first, as SmolLM2's
`smollm`) and only ASCII text; anything else stays on the Rust pipeline. Added tokens (special
or not, all matched on raw text) split the text first, leftmost-longest, as the Rust added
vocabulary does, and each segment between them is pre-tokenized alone.
"""
from __future__ import annotations

import re
from itertools import chain, islice
from typing import Callable, Iterable

_S = r"\t\n\x0b\x0c\r "  # \s on ASCII (Unicode White_Space: no \x1c-\x1f)
_CONTRACTIONS = r"'s|'t|'re|'ve|'m|'ll|'d"
# The GPT-2 regex with ASCII classes.
_GPT2 = rf"{_CONTRACTIONS}| ?[A-Za-z]+| ?[0-9]+| ?[^{_S}A-Za-z0-9]+|[{_S}]+(?![^{_S}])|[{_S}]+"
# Digits split each on its own before the GPT-2 regex, which then sees each run between digits
# alone: a digit is one piece (no leading space), and whitespace before a digit ends its run, so
# `\s+(?!\S)` takes it all (a digit counts as the run's end, not as the \S that stops it).
_DIGITS = rf"{_CONTRACTIONS}| ?[A-Za-z]+|[0-9]| ?[^{_S}A-Za-z0-9]+|[{_S}]+(?![^{_S}0-9])|[{_S}]+"
PATTERNS = {"gpt2": _GPT2, "digits": _DIGITS}

MAX_CACHED_PIECE_CHARS = 64  # longer pieces (runs of spaces or symbols) are rare: not kept
MAX_CACHED_PIECES = 1 << 17  # then the cache starts over (a dict, ~20 MB at most)


class AsciiPieceEncoder:
    """Text -> ids for ASCII text, identical to the Rust pipeline it stands in for."""

    def __init__(self, kind: str, added_tokens: dict[str, int],
                 bpe: Callable[[str], list[int]], byte_to_unicode: dict[int, str]) -> None:
        """`kind`: "gpt2" or "digits"; `added_tokens`: every added token's text -> id; `bpe`: the
        Rust model's ids for one byte-level mapped piece; `byte_to_unicode`: GPT-2's byte map."""
        self._pieces = re.compile(PATTERNS[kind])
        ascii_added = sorted((t for t in added_tokens if t and t.isascii()), key=len, reverse=True)
        # One capturing group: re.split returns [text, token, text, token, ..., text]. Longest
        # first, so at each position the longest token wins (the Rust side's leftmost-longest).
        self._added_split = re.compile("(" + "|".join(map(re.escape, ascii_added)) + ")").split \
            if ascii_added else None
        self._added = added_tokens
        self._bpe = bpe
        self._char_of_byte = [byte_to_unicode[b] for b in range(128)]
        self._cache: dict[str, tuple[int, ...]] = {}  # piece -> ids
        self._spaced: dict[str, tuple[int, ...]] = {}  # word -> ids of " " + word

    def encode(self, text: str) -> list[int]:
        """`text` must be ASCII (`str.isascii()`)."""
        if self._added_split is None:
            return self._encode_segment(text)
        parts = self._added_split(text)
        if len(parts) == 1:
            return self._encode_segment(text)
        ids: list[int] = []
        added = self._added
        for i, part in enumerate(parts):
            if i % 2:
                ids.append(added[part])
            elif part:
                ids.extend(self._encode_segment(part))
        return ids

    def _encode_segment(self, text: str) -> list[int]:
        # Printable: no whitespace but spaces (nor other control characters, which go the long way).
        if text.isprintable() and "  " not in text and text[:1] != " " and text[-1:] != " ":
            return self._encode_words(text.split(" "))
        pieces = self._pieces.findall(text)
        try:  # one C-level pass when every piece is known (the common case)
            return list(chain.from_iterable(map(self._cache.__getitem__, pieces)))
        except KeyError:
            return self._encode_pieces(pieces)

    def _encode_words(self, words: list[str]) -> list[int]:
        """Words that single spaces separated: the first one's pieces, then " " + each other's."""
        ids = self._encode_pieces(self._pieces.findall(words[0]))
        num_first = len(ids)
        spaced = self._spaced
        try:  # one C-level pass when every word is known (the common case)
            ids.extend(chain.from_iterable(map(spaced.__getitem__, islice(words, 1, None))))
            return ids
        except KeyError:
            del ids[num_first:]  # what the pass added before the unknown word
        for word in islice(words, 1, None):
            word_ids = spaced.get(word)
            if word_ids is None:
                word_ids = tuple(self._encode_pieces(self._pieces.findall(" " + word)))
                if len(word) < MAX_CACHED_PIECE_CHARS:
                    if len(spaced) >= MAX_CACHED_PIECES:
                        spaced.clear()
                    spaced[word] = word_ids
            ids.extend(word_ids)
        return ids

    def _encode_pieces(self, pieces: Iterable[str]) -> list[int]:
        """Piece by piece, filling the cache (other threads may fill or clear it meanwhile: the
        result never reads back an entry, only what this call found or computed)."""
        cache = self._cache
        ids: list[int] = []
        for piece in pieces:
            piece_ids = cache.get(piece)
            if piece_ids is None:
                piece_ids = tuple(self._bpe("".join(map(self._char_of_byte.__getitem__, piece.encode("ascii")))))
                if len(piece) <= MAX_CACHED_PIECE_CHARS:
                    if len(cache) >= MAX_CACHED_PIECES:
                        cache.clear()
                    cache[piece] = piece_ids
            ids.extend(piece_ids)
        return ids
