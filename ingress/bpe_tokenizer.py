"""BpeTokenizer: the `Tokenizer` for real models, backed by the Rust `tokenizers` library.

Two ways in: a Hugging Face `tokenizer.json` (plus tokenizer_config.json / generation_config.json),
or the tokenizer stored in GGUF metadata (vocab, merges, token types, pre-tokenizer name). The
pre-tokenizer regexes for GGUF follow llama.cpp (`llama-vocab.cpp`), which is what the GGUF's
`tokenizer.ggml.pre` promises: e.g. `smollm` splits every digit on its own before the GPT-2 regex.

Encode is Rust's pipeline, or for ASCII text of the GPT-2-regex kinds the faster exact
AsciiPieceEncoder (ascii_bpe.py); everything Python-side (id -> bytes, the special
set) is a table built once at construction.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from tokenizers import AddedToken, Regex, Tokenizer as RustTokenizer, decoders, models, pre_tokenizers

from ingress.ascii_bpe import PATTERNS as ASCII_KINDS, AsciiPieceEncoder

# GGUF token types (llama.cpp `llama_token_type`).
TOKEN_TYPE_NORMAL, TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED = 1, 3, 4

# The GPT-2 regex as llama.cpp writes it; HF's ByteLevel(use_regex=True) applies the same split.
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
           r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# llama.cpp's LLAMA_VOCAB_PRE_TYPE_DEFAULT: four regexes applied one after the other.
_DEFAULT = [r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"]

# `tokenizer.ggml.pre` name -> kind (names as llama.cpp accepts them).
_PRE_KINDS = {
    "default": "default",
    "gpt2": "gpt2", "gpt-2": "gpt2", "phi-2": "gpt2", "mpt": "gpt2", "olmo": "gpt2",
    "llama3": "llama3", "llama-v3": "llama3", "llama-bpe": "llama3", "dbrx": "llama3",
    "smaug-bpe": "llama3", "falcon3": "llama3",
    "qwen2": "qwen2", "stablelm2": "qwen2", "deepseek-r1-qwen": "qwen2",
    "smollm": "digits", "starcoder": "digits", "refact": "digits", "command-r": "digits",
    "codeshell": "digits", "exaone": "digits",
}

# ASCII text up to this long is encoded by AsciiPieceEncoder (ascii_bpe.py), which holds the
# interpreter lock (~0.05 ms per 1,000 characters); longer text stays on the Rust pipeline, which
# releases it, so that a huge prompt never stalls the event loop.
MAX_ASCII_PATH_CHARS = 32768

# Tokens llama.cpp treats as end-of-generation by their text (llama-vocab.cpp, special_eog_ids).
_EOG_TEXTS = frozenset({"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                        "<|eom_id|>", "<EOT>", "_<EOT>", "<end_of_utterance>"})


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map used by byte-level BPE vocabularies."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
        + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


_UNICODE_TO_BYTE = {c: b for b, c in bytes_to_unicode().items()}


def _byte_level_bytes(token: str) -> bytes:
    try:
        return bytes(_UNICODE_TO_BYTE[c] for c in token)
    except KeyError:  # not a byte-level token (a vocab oddity): its text is the best we have
        return token.encode("utf-8")


def _sentencepiece_bytes(token: str) -> bytes:
    if len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
        return bytes([int(token[3:5], 16)])
    return token.replace("\u2581", " ").encode("utf-8")


def gguf_pre_tokenizer(pre: str | None) -> pre_tokenizers.PreTokenizer:
    """The pre-tokenizer llama.cpp uses for `tokenizer.ggml.pre` (ValueError when unknown)."""
    kind = _PRE_KINDS.get(pre or "default")
    if kind is None:
        raise ValueError(f"unsupported GGUF pre-tokenizer {pre!r}; supported: {sorted(_PRE_KINDS)}")
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=kind in ("gpt2", "digits"))
    if kind == "gpt2":
        return byte_level
    if kind == "digits":
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    regexes = {"llama3": [_LLAMA3], "qwen2": [_QWEN2], "default": _DEFAULT}[kind]
    splits = [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in regexes]
    return pre_tokenizers.Sequence([*splits, byte_level])


def _clean_up_tokenization(text: str) -> str:
    """transformers' `clean_up_tokenization` (used when tokenizer_config asks for it)."""
    for a, b in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
                 (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")):
        text = text.replace(a, b)
    return text


class BpeTokenizer:
    """A `Tokenizer` over a Rust `tokenizers.Tokenizer` whose post-processor we do not rely on:
    BOS is prepended here, so `add_bos` is the single source of truth."""

    def __init__(self, backend: RustTokenizer, *, bos_token_id: int | None, eos_token_ids: frozenset[int],
                 add_bos: bool, chat_template: str | None, eos_token_id: int | None = None,
                 byte_level: bool = True, clean_up_tokenization_spaces: bool = False,
                 ascii_kind: str | None = None) -> None:
        """`ascii_kind`: the backend's pre-tokenizer is this GPT-2-regex kind of ascii_bpe.py
        ("gpt2", "digits") with no normalizer: ASCII text may then take AsciiPieceEncoder."""
        self._backend = backend
        self.vocab_size = backend.get_vocab_size(with_added_tokens=True)
        self.bos_token_id = bos_token_id
        self.eos_token_ids = frozenset(eos_token_ids)
        self.add_bos = add_bos and bos_token_id is not None
        self.chat_template = chat_template
        self._clean_up = clean_up_tokenization_spaces
        added = backend.get_added_tokens_decoder()
        self._special = frozenset(i for i, t in added.items() if t.special)
        self.special_tokens = {added[i].content: i for i in sorted(self._special)}
        self._text_backend: RustTokenizer | None = None  # made on first use (parse_special=False)
        to_bytes = _byte_level_bytes if byte_level else _sentencepiece_bytes
        table: list[bytes] = []
        for i in range(self.vocab_size):
            text = backend.id_to_token(i)
            if text is None:
                table.append(b"")
            elif i in added:  # added tokens hold raw text (the decoder passes them through as is)
                table.append(text.encode("utf-8"))
            else:
                table.append(to_bytes(text))
        self._bytes = table
        self._ascii: AsciiPieceEncoder | None = None
        if ascii_kind is not None and byte_level:
            model = backend.model
            self._ascii = AsciiPieceEncoder(
                ascii_kind, {t.content: i for i, t in added.items()},
                lambda piece: [t.id for t in model.tokenize(piece)], bytes_to_unicode())
        # Token texts the chat template needs ({{ bos_token }} etc.).
        self.bos_token = self._text(bos_token_id)
        if eos_token_id is None and self.eos_token_ids:
            eos_token_id = min(self.eos_token_ids)
        self.eos_token = self._text(eos_token_id)

    def _text(self, token_id: int | None) -> str | None:
        return None if token_id is None else self._backend.id_to_token(token_id)

    def encode(self, text: str, add_special_tokens: bool = True, parse_special: bool = True) -> list[int]:
        # ASCII text (not too long) of a GPT-2-regex kind: AsciiPieceEncoder, the same ids at
        # ~0.3-0.45 vs ~1.4-2 ms of CPU for a 1,000-token prompt. Otherwise, Rust's
        # encode_batch_fast, not encode(): it releases the interpreter lock while it works (encode()
        # holds it, so a long prompt stalled the event loop and the GPU stage's threads for its
        # whole tokenization), and it skips the character offsets we never read: 1.76 vs 2.32 ms
        # of CPU on a 1,000-token prompt (`python -m lab.tokenizer_cost`). `ttft serve` sets
        # TOKENIZERS_PARALLELISM=false: the one-text batch runs on the calling thread, whose CPU
        # clock the trace reads, and no rayon pool is started.
        if not parse_special:
            ids = self._text_only().encode_batch_fast([text], add_special_tokens=False)[0].ids
        elif self._ascii is not None and len(text) <= MAX_ASCII_PATH_CHARS and text.isascii():
            ids = self._ascii.encode(text)
        else:
            ids = self._backend.encode_batch_fast([text], add_special_tokens=False)[0].ids
        if add_special_tokens and self.add_bos:
            ids.insert(0, self.bos_token_id)
        return ids

    def _text_only(self) -> RustTokenizer:
        """A copy of the backend that reads special tokens' texts as text (the other added tokens
        still match): what a chat's contents are tokenized with (special_guard.py). Two pool
        threads may both make it at first; either copy does."""
        if self._text_backend is None:
            copy = RustTokenizer.from_str(self._backend.to_str())
            copy.encode_special_tokens = True
            self._text_backend = copy
        return self._text_backend

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        # decode_batch, not decode(): it releases the interpreter lock while it works (decode()
        # holds it, so /detokenize of 100k ids in the pool stalled the event loop for its whole run).
        text = self._backend.decode_batch([list(ids)], skip_special_tokens=skip_special_tokens)[0]
        return _clean_up_tokenization(text) if self._clean_up else text

    def token_bytes(self, token_id: int) -> bytes:
        if 0 <= token_id < len(self._bytes):
            return self._bytes[token_id]
        return b""  # ids past the tokenizer (padded model vocab) stand for nothing

    def is_special(self, token_id: int) -> bool:
        return token_id in self._special

    def token_to_id(self, text: str) -> int | None:
        return self._backend.token_to_id(text)

    # ---- constructors -------------------------------------------------------------------------

    @classmethod
    def from_gguf_metadata(cls, meta: Mapping[str, Any]) -> "BpeTokenizer":
        """From GGUF key/values (`tokenizer.ggml.*`, `tokenizer.chat_template`) as Python values."""
        model = meta.get("tokenizer.ggml.model")
        if model != "gpt2":
            raise ValueError(f"unsupported GGUF tokenizer model {model!r} (only BPE 'gpt2' is supported)")
        tokens: list[str] = list(meta["tokenizer.ggml.tokens"])
        types: list[int] = list(meta.get("tokenizer.ggml.token_type") or [TOKEN_TYPE_NORMAL] * len(tokens))
        merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges", [])]
        pre = meta.get("tokenizer.ggml.pre")
        bpe = models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges,
                         ignore_merges=_PRE_KINDS.get(pre or "default") == "llama3")
        backend = RustTokenizer(bpe)
        backend.pre_tokenizer = gguf_pre_tokenizer(pre)
        backend.decoder = decoders.ByteLevel()
        # Control tokens are matched in raw text before pre-tokenization (llama.cpp parse_special).
        backend.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                                    for i, t in enumerate(types) if t == TOKEN_TYPE_CONTROL])
        backend.add_tokens([AddedToken(tokens[i], special=False, normalized=False)
                            for i, t in enumerate(types) if t == TOKEN_TYPE_USER_DEFINED])
        eos = {meta.get(f"tokenizer.ggml.{k}_token_id") for k in ("eos", "eot", "eom")} - {None}
        eos |= {i for i, t in enumerate(types) if t == TOKEN_TYPE_CONTROL and tokens[i] in _EOG_TEXTS}
        bos = meta.get("tokenizer.ggml.bos_token_id")
        kind = _PRE_KINDS.get(pre or "default")
        return cls(backend, bos_token_id=bos, eos_token_ids=frozenset(int(e) for e in eos),
                   ascii_kind=kind if kind in ASCII_KINDS else None,
                   eos_token_id=meta.get("tokenizer.ggml.eos_token_id"),
                   add_bos=bool(meta.get("tokenizer.ggml.add_bos_token", False)),
                   chat_template=meta.get("tokenizer.chat_template"))

    @classmethod
    def from_dir(cls, directory: str | Path, extra_eos_ids: Sequence[int] = ()) -> "BpeTokenizer":
        """From an HF model directory holding tokenizer.json (+ tokenizer_config.json,
        generation_config.json, chat_template.jinja when present)."""
        d = Path(directory)
        if not (d / "tokenizer.json").is_file():
            raise ValueError(f"{d} has no tokenizer.json")
        backend = RustTokenizer.from_file(str(d / "tokenizer.json"))
        tok_cfg = _read_json(d / "tokenizer_config.json")
        gen_cfg = _read_json(d / "generation_config.json")
        bos = _token_id(backend, tok_cfg.get("bos_token"))
        if bos is None and isinstance(gen_cfg.get("bos_token_id"), int):
            bos = gen_cfg["bos_token_id"]
        eos: set[int] = set(extra_eos_ids)
        if (primary_eos := _token_id(backend, tok_cfg.get("eos_token"))) is not None:
            eos.add(primary_eos)
        g = gen_cfg.get("eos_token_id")
        eos.update(g if isinstance(g, list) else [g] if isinstance(g, int) else [])
        add_bos = tok_cfg.get("add_bos_token")
        if add_bos is None:  # no explicit flag: does the tokenizer.json post-processor add it?
            probe = backend.encode("a", add_special_tokens=True).ids
            add_bos = bos is not None and bool(probe) and probe[0] == bos
        decoder = json.loads(backend.to_str()).get("decoder") or {}
        return cls(backend, bos_token_id=bos, eos_token_ids=frozenset(eos), add_bos=bool(add_bos),
                   chat_template=_chat_template(d, tok_cfg), eos_token_id=primary_eos, byte_level="ByteLevel" in json.dumps(decoder),
                   clean_up_tokenization_spaces=bool(tok_cfg.get("clean_up_tokenization_spaces", False)))


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _token_id(backend: RustTokenizer, token: Any) -> int | None:
    if isinstance(token, dict):  # {"content": "<s>", ...} in older tokenizer_config files
        token = token.get("content")
    return backend.token_to_id(token) if isinstance(token, str) else None


def _chat_template(d: Path, tok_cfg: dict) -> str | None:
    if (d / "chat_template.jinja").is_file():
        return (d / "chat_template.jinja").read_text(encoding="utf-8")
    template = tok_cfg.get("chat_template") or _read_json(d / "chat_template.json").get("chat_template")
    if isinstance(template, list):  # named templates: [{"name": "default", "template": ...}, ...]
        named = {t.get("name"): t.get("template") for t in template}
        template = named.get("default") or next(iter(named.values()), None)
    return template
