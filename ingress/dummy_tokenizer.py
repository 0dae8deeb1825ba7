"""DummyTokenizer: a byte tokenizer that fits any vocabulary size >= 300, for random-weight models.

    ids 0, 1, 2      special: `<s>` (BOS), `</s>` (EOS), `<pad>`
    ids 3 .. 258     the 256 byte values (id = byte + 3)
    ids 259 ..       filler words: id i stands for the ASCII text " t<i>"

Encoding only ever produces byte ids (plus BOS and any special-token text), so every string round
trips exactly; the filler ids exist so a random model's samples across the whole vocab still decode
to something printable.
"""
from __future__ import annotations

import re
from typing import Sequence

BOS_ID, EOS_ID, PAD_ID = 0, 1, 2
BYTE_OFFSET = 3
NUM_SPECIAL = 3
FIRST_FILLER_ID = BYTE_OFFSET + 256
MIN_VOCAB_SIZE = 300
SPECIAL_TOKENS = {"<s>": BOS_ID, "</s>": EOS_ID, "<pad>": PAD_ID}

DUMMY_CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)

_SPECIAL_RE = re.compile("(" + "|".join(re.escape(s) for s in SPECIAL_TOKENS) + ")")
# bytes.translate can't map to ids > 255, so encoding goes through this precomputed table instead.
_BYTE_IDS = [b + BYTE_OFFSET for b in range(256)]


class DummyTokenizer:
    def __init__(self, vocab_size: int) -> None:
        if vocab_size < MIN_VOCAB_SIZE:
            raise ValueError(f"dummy tokenizer needs vocab_size >= {MIN_VOCAB_SIZE}, got {vocab_size}")
        self.vocab_size = vocab_size
        self.bos_token_id: int | None = BOS_ID
        self.eos_token_ids = frozenset({EOS_ID})
        self.add_bos = True
        self.chat_template: str | None = DUMMY_CHAT_TEMPLATE
        self.bos_token, self.eos_token = "<s>", "</s>"
        self.special_tokens = dict(SPECIAL_TOKENS)
        self._special_bytes = {i: s.encode() for s, i in SPECIAL_TOKENS.items()}

    def encode(self, text: str, add_special_tokens: bool = True, parse_special: bool = True) -> list[int]:
        ids = [BOS_ID] if add_special_tokens else []
        table = _BYTE_IDS
        for i, part in enumerate(_SPECIAL_RE.split(text) if parse_special else [text]):
            if i % 2:  # odd pieces of a capturing split are the special-token matches
                ids.append(SPECIAL_TOKENS[part])
            elif part:
                ids.extend([table[b] for b in part.encode("utf-8")])
        return ids

    def token_bytes(self, token_id: int) -> bytes:
        if not 0 <= token_id < self.vocab_size:
            raise ValueError(f"token id {token_id} out of range for vocab size {self.vocab_size}")
        if token_id < NUM_SPECIAL:
            return self._special_bytes[token_id]
        if token_id < FIRST_FILLER_ID:
            return bytes([token_id - BYTE_OFFSET])
        return b" t%d" % token_id

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        parts = [self.token_bytes(i) for i in ids if not (skip_special_tokens and i < NUM_SPECIAL)]
        return b"".join(parts).decode("utf-8", errors="replace")

    def is_special(self, token_id: int) -> bool:
        return 0 <= token_id < NUM_SPECIAL
