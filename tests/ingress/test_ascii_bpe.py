"""AsciiPieceEncoder gives exactly the Rust pipeline's ids (SmolLM2's `smollm` digits kind and
the plain GPT-2 kind): every ASCII character in many contexts, random ASCII text with added
tokens, and the cache's limits."""
from __future__ import annotations

import random

import pytest

import ingress.ascii_bpe as ascii_bpe
from gpu_stage.loaders import default_model_path
from gpu_stage.loaders.gguf_loader import FastGGUFReader, read_gguf_metadata
from ingress.bpe_tokenizer import MAX_ASCII_PATH_CHARS, BpeTokenizer

ASCII = [chr(c) for c in range(128)]
ALPHABET = "aZ ' \n\t\r\x0b\x0c 0123456789 sdtmlrev .,!?;:-_()<>|$^~`\"\\ \x00\x1c\x1f\x7f"


@pytest.fixture(scope="module")
def meta() -> dict:
    return read_gguf_metadata(FastGGUFReader(str(default_model_path())))


@pytest.fixture(scope="module", params=["smollm", "gpt2"])
def tok(request, meta) -> BpeTokenizer:
    return BpeTokenizer.from_gguf_metadata({**meta, "tokenizer.ggml.pre": request.param})


def rust_ids(tok: BpeTokenizer, text: str) -> list[int]:
    return tok._backend.encode_batch_fast([text], add_special_tokens=False)[0].ids


def test_the_fast_path_is_on_for_both_kinds(tok):
    assert tok._ascii is not None


def test_every_ascii_character_in_context(tok):
    contexts = ["{c}", "{c}{c}", "a{c}b", " {c}1", "1{c} ", "{c}  x", "x {c}'s", "{c}1{c}", "'{c}",
                "  {c}", "{c}\n\nx", "9{c}9", "ab {c}{c} cd", "{c}<|im_start|>{c}"]
    for c in ASCII:
        for form in contexts:
            text = form.format(c=c)
            assert tok.encode(text, add_special_tokens=False) == rust_ids(tok, text), repr(text)


def test_random_ascii_text_with_added_tokens(tok):
    rng = random.Random(0)
    added = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<repo_name>", "<reponame>", "<|im_start"]
    for _ in range(3000):
        parts = []
        for _ in range(rng.randint(1, 8)):
            if rng.random() < 0.15:
                parts.append(rng.choice(added))
            else:
                parts.append("".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 12))))
        text = "".join(parts)
        assert tok.encode(text, add_special_tokens=False) == rust_ids(tok, text), repr(text)


def test_english_prompts_and_bos(tok):
    from bench.workloads import WORDS
    rng = random.Random(1)
    for n in (1, 30, 1000):
        text = " ".join(rng.choice(WORDS) for _ in range(n)) + " in 2024, 3.14 of 10,000 people's"
        assert tok.encode(text, add_special_tokens=False) == rust_ids(tok, text)
        expected = ([tok.bos_token_id] if tok.add_bos else []) + rust_ids(tok, text)
        assert tok.encode(text) == expected


def test_text_outside_the_fast_path_is_the_rust_pipelines(tok, monkeypatch):
    calls = []
    monkeypatch.setattr(tok._ascii, "encode", lambda text: calls.append(text) or [])
    for text in ("naïve café 😀", "x" * (MAX_ASCII_PATH_CHARS + 1)):
        assert tok.encode(text, add_special_tokens=False) == rust_ids(tok, text)
    assert calls == []


def test_cache_limits_keep_the_ids(tok, monkeypatch):
    monkeypatch.setattr(ascii_bpe, "MAX_CACHED_PIECES", 8)
    encoder = tok._ascii
    encoder._cache.clear()
    text = " ".join(f"w{chr(97 + i % 26)}{chr(97 + i // 26 % 26)}" for i in range(200)) + "!" * 100
    assert encoder.encode(text) == rust_ids(tok, text)
    assert len(encoder._cache) <= 8
    assert "!" * 100 not in encoder._cache  # over MAX_CACHED_PIECE_CHARS: not kept
    assert encoder.encode(text) == rust_ids(tok, text)


def test_other_kinds_stay_on_the_rust_pipeline(meta):
    tok = BpeTokenizer.from_gguf_metadata({**meta, "tokenizer.ggml.pre": "llama3"})
    assert tok._ascii is None


def test_single_spaced_words_take_the_word_cache(tok):
    """One line of words that single spaces separate (digits, symbols and contractions inside
    words too): the word path, whose ids are the Rust pipeline's."""
    rng = random.Random(2)
    alphabet = "abcXYZ0123456789',.!?-$<>|'sdtlmrve"
    tok._ascii._spaced.clear()
    for _ in range(3000):
        words = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8))) for _ in range(rng.randint(1, 12))]
        text = " ".join(words)
        assert tok.encode(text, add_special_tokens=False) == rust_ids(tok, text), repr(text)
    assert tok._ascii._spaced  # the path was taken


def test_other_spacing_takes_the_regex(tok):
    tok._ascii._spaced.clear()
    for text in (" lead", "trail ", "two  spaces", "tab\there", "line\nbreak", "bell\x07 x", ""):
        assert tok.encode(text, add_special_tokens=False) == rust_ids(tok, text), repr(text)
    assert not tok._ascii._spaced


def test_word_cache_limits_keep_the_ids(tok, monkeypatch):
    monkeypatch.setattr(ascii_bpe, "MAX_CACHED_PIECES", 8)
    encoder = tok._ascii
    encoder._spaced.clear()
    text = " ".join(f"w{chr(97 + i % 26)}{chr(97 + i // 26 % 26)}" for i in range(200)) + " " + "x" * 100
    assert encoder.encode(text) == rust_ids(tok, text)
    assert len(encoder._spaced) <= 8 and "x" * 100 not in encoder._spaced
    assert encoder.encode(text) == rust_ids(tok, text)
