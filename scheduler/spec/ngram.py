"""Prompt lookup (vLLM's "ngram" method): guess the next tokens by finding the sequence's last n
tokens earlier in the sequence (prompt and output) and proposing what followed them there.

The longest suffix first, from `prompt_lookup_max` down to `prompt_lookup_min`; the most recent
earlier occurrence with a full continuation wins (an answer that quotes its document repeats what
it quoted last), else the most recent one. The
search runs in C: the ids are packed as int32 bytes and `bytes.rfind` looks for the suffix's
bytes; a hit at an offset that is not a multiple of 4 straddles two ids and is skipped.
"""
from __future__ import annotations

from array import array

_ITEM = 4  # bytes per packed id


def propose_ngram(token_ids: list[int], num_tokens: int, lookup_min: int, lookup_max: int) -> list[int]:
    """Up to `num_tokens` ids that followed the latest earlier occurrence of the longest suffix
    (lookup_max..lookup_min ids long) of `token_ids`; [] when no suffix recurs."""
    n_total = len(token_ids)
    if num_tokens <= 0 or n_total < lookup_min + 1:
        return []
    packed = array("i", token_ids).tobytes()
    for n in range(min(lookup_max, n_total - 1), lookup_min - 1, -1):
        pattern = packed[-n * _ITEM:]
        # First an occurrence followed by all num_tokens ids (in a run like "a a a a" the latest
        # is followed by one), then any that ends before the last id (not the suffix itself).
        for last in (n_total - num_tokens, n_total - 1):
            at = _rfind_aligned(packed, pattern, last * _ITEM)
            if at >= 0:
                start = at // _ITEM + n
                return token_ids[start:start + num_tokens]
    return []


def _rfind_aligned(packed: bytes, pattern: bytes, end: int) -> int:
    """The latest offset, a multiple of _ITEM, where `pattern` ends at or before `end`; -1: none."""
    while end >= len(pattern):
        at = packed.rfind(pattern, 0, end)
        if at < 0 or at % _ITEM == 0:
            return at
        end = at + len(pattern) - 1  # look further back (the straddling hit excluded)
    return -1
