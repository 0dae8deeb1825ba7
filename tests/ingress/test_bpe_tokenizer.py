"""BpeTokenizer against transformers, on the default SmolLM2 GGUF and on a tokenizer.json we build."""
from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from gpu_stage.loaders import default_model_path
from gpu_stage.loaders.gguf_loader import FastGGUFReader, read_gguf_metadata
from ingress.bpe_tokenizer import BpeTokenizer, gguf_pre_tokenizer

# No digits here: transformers' GGUF converter drops SmolLM2's digit split (tested separately).
TEXTS = [
    "Hello, world! How are you doing today?",
    "def f(x):\n    return {'a': x ** two}  # comment\n\n\n",
    "Emoji: 😀🎉👍🏽 and CJK: 你好，世界。日本語のテキスト 한국어",
    "   leading and   multiple    spaces\t\ttabs\n\n\nnewlines  ",
    "It's we'll they've I'm you'd DON'T",
    "naïve café résumé — “quotes” … Ω≈ç√∫",
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "a<|im_start|>b<|im_end|>c<|endoftext|><repo_name>",
    "",
]


@pytest.fixture(scope="module")
def smollm() -> BpeTokenizer:
    return BpeTokenizer.from_gguf_metadata(read_gguf_metadata(FastGGUFReader(str(default_model_path()))))


@pytest.fixture(scope="module")
def reference():
    transformers = pytest.importorskip("transformers")
    path = default_model_path()
    return transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


@pytest.mark.parametrize("text", TEXTS)
def test_ids_and_decode_match_transformers(smollm, reference, text):
    ids = smollm.encode(text)
    assert ids == reference.encode(text, add_special_tokens=True)
    for skip in (True, False):
        assert smollm.decode(ids, skip_special_tokens=skip) == reference.decode(ids, skip_special_tokens=skip)


def test_decode_of_arbitrary_ids_matches_transformers(smollm, reference):
    ids = [1, 9690, 198, 0, 33, 2, 49151, 17, 216, 30, 100, 2000, 40000]
    for skip in (True, False):
        assert smollm.decode(ids, skip_special_tokens=skip) == reference.decode(ids, skip_special_tokens=skip)


def test_special_tokens_and_metadata(smollm):
    assert smollm.encode("<|im_start|>") == [1]
    assert smollm.is_special(1) and smollm.is_special(2) and smollm.is_special(0)
    assert not any(smollm.is_special(i) for i in smollm.encode("hello world"))
    assert smollm.vocab_size == 49152
    assert smollm.bos_token_id == 1 and not smollm.add_bos
    assert smollm.encode("hi") == smollm.encode("hi", add_special_tokens=False)
    # eos from metadata (2 = <|im_end|>) plus llama.cpp's end-of-generation text <|endoftext|>
    assert smollm.eos_token_ids == frozenset({0, 2})
    assert smollm.eos_token == "<|im_end|>" and smollm.bos_token == "<|im_start|>"
    assert smollm.chat_template is not None and "<|im_start|>" in smollm.chat_template


def test_digits_are_split_one_by_one(smollm):
    ids = smollm.encode("12345")
    assert len(ids) == 5 and [smollm.token_bytes(i) for i in ids] == [b"1", b"2", b"3", b"4", b"5"]
    ids = smollm.encode("abc123")
    assert [smollm.token_bytes(i) for i in ids][-3:] == [b"1", b"2", b"3"]
    assert b"".join(smollm.token_bytes(i) for i in ids[:-3]) == b"abc"
    assert [smollm.token_bytes(i) for i in smollm.encode(" 2024")] == [b" ", b"2", b"0", b"2", b"4"]


@pytest.mark.parametrize("text", [t for t in TEXTS if "<" not in t] + ["x=42; y = 3.14e-5\n", "\x00\x7f\u200b"])
def test_token_bytes_round_trip(smollm, text):
    ids = smollm.encode(text)
    assert b"".join(smollm.token_bytes(i) for i in ids) == text.encode("utf-8")


def test_token_bytes_of_special_and_multibyte(smollm):
    assert smollm.token_bytes(1) == b"<|im_start|>"
    ids = smollm.encode("😀")
    assert len(ids) > 1  # a multi-token character: each piece is a fragment of its UTF-8 bytes
    assert b"".join(smollm.token_bytes(i) for i in ids) == "😀".encode()
    assert smollm.token_bytes(10**6) == b""


@pytest.mark.parametrize("pre, text, pieces", [
    ("llama-bpe", "abc 12345 it's\n\n  x", ["abc", "Ġ", "123", "45", "Ġit", "'s", "ĊĊ", "Ġ", "Ġx"]),
    ("qwen2", "ab 123", ["ab", "Ġ", "1", "2", "3"]),
    ("gpt2", "ab 123 it's", ["ab", "Ġ123", "Ġit", "'s"]),
    ("smollm", "ab 123", ["ab", "Ġ", "1", "2", "3"]),
    ("default", "a+b 12345", ["a", "+", "b", "Ġ", "123", "45"]),
])
def test_gguf_pre_tokenizers(pre, text, pieces):
    assert [p for p, _ in gguf_pre_tokenizer(pre).pre_tokenize_str(text)] == pieces


def test_unknown_pre_tokenizer_is_a_clear_error():
    with pytest.raises(ValueError, match="pre-tokenizer 'nonesuch'"):
        gguf_pre_tokenizer("nonesuch")


def test_from_dir_matches_transformers(tmp_path):
    transformers = pytest.importorskip("transformers")
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    corpus = ["hello world, the quick brown fox jumps over the lazy dog"] * 20 + ["ünïcode 漢字 🙂 123"] * 5
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<s>", "</s>", "<|eot|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(corpus, trainer)
    backend.save(str(tmp_path / "tokenizer.json"))
    template = "{% for m in messages %}<s>{{ m['content'] }}</s>{% endfor %}"
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "add_bos_token": True, "chat_template": template}))
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [1, 2]}))
    tok = BpeTokenizer.from_dir(tmp_path)
    ref = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    assert tok.bos_token_id == 0 and tok.add_bos and tok.eos_token_ids == frozenset({1, 2})
    assert tok.chat_template == template and tok.eos_token == "</s>"
    for text in ["hello world", "the fox<|eot|> ünïcode 漢字 🙂 123", "   x  "]:
        ids = tok.encode(text)
        assert ids[0] == 0 and ids[1:] == tok.encode(text, add_special_tokens=False)
        assert ids[1:] == ref.encode(text, add_special_tokens=False)
        assert b"".join(tok.token_bytes(i) for i in ids[1:] if not tok.is_special(i)) \
            == text.replace("<|eot|>", "").encode()
        for skip in (True, False):
            assert tok.decode(ids, skip_special_tokens=skip) == ref.decode(ids, skip_special_tokens=skip)


def test_from_dir_without_tokenizer_json_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="no tokenizer.json"):
        BpeTokenizer.from_dir(tmp_path)


def test_sentencepiece_style_dir(tmp_path):
    """Llama 2 / Mistral style: metaspace `▁` and `<0xNN>` byte-fallback tokens, no byte-level map."""
    transformers = pytest.importorskip("transformers")
    from tokenizers import normalizers
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"<0x{b:02X}>": 3 + b for b in range(256)},
             "\u2581": 259, "a": 260, "b": 261, "\u2581a": 262}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[("\u2581", "a")], byte_fallback=True, unk_token="<unk>"))
    backend.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    backend.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
    backend.add_special_tokens(["<s>", "</s>"])
    backend.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
        "unk_token": "<unk>", "add_bos_token": True}))
    tok = BpeTokenizer.from_dir(tmp_path)
    ref = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    text = "a b é"
    ids = tok.encode(text)
    assert ids == [1, 262, 259, 261, 259, 3 + 0xC3, 3 + 0xA9]
    # SentencePiece pieces carry their leading space; the decoder strips the first one.
    assert b"".join(tok.token_bytes(i) for i in ids[1:]) == b" " + text.encode()
    assert tok.decode(ids) == ref.decode(ids, skip_special_tokens=True) == text
    assert tok.eos_token_ids == frozenset({2})


def test_added_tokens_have_raw_text_bytes(tmp_path):
    """Added (non-special) tokens are stored as raw text, not byte-level encoded."""
    from tokenizers import AddedToken
    from ingress.bpe_tokenizer import bytes_to_unicode
    backend = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(bytes_to_unicode().values())}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_tokens([AddedToken("é中", normalized=False)])
    backend.save(str(tmp_path / "tokenizer.json"))
    tok = BpeTokenizer.from_dir(tmp_path)
    ids = tok.encode("xé中y")
    assert len(ids) == 3 and not tok.is_special(ids[1])
    assert b"".join(tok.token_bytes(i) for i in ids) == "xé中y".encode() and tok.decode(ids) == "xé中y"


def test_parse_special_off_reads_special_texts_as_text_and_added_tokens_still_match(tmp_path):
    from tokenizers import AddedToken
    from ingress.bpe_tokenizer import bytes_to_unicode
    backend = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(bytes_to_unicode().values())}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens([AddedToken("<|im_end|>", special=True, normalized=False)])
    backend.add_tokens([AddedToken("<think>", normalized=False)])
    tok = BpeTokenizer(backend, bos_token_id=None, eos_token_ids=frozenset(), add_bos=False, chat_template=None)
    end, think = tok.special_tokens["<|im_end|>"], backend.token_to_id("<think>")
    assert tok.special_tokens == {"<|im_end|>": end}
    assert tok.encode("a<|im_end|><think>", add_special_tokens=False) == [tok.encode("a", False)[0], end, think]
    as_text = tok.encode("a<|im_end|><think>", add_special_tokens=False, parse_special=False)
    assert end not in as_text and as_text[-1] == think and tok.decode(as_text) == "a<|im_end|><think>"


def test_decode_leaves_the_interpreter_lock_to_other_threads(smollm):
    """/detokenize of a capped request decodes in the tokenizer pool: the event loop's thread must run
    meanwhile (Rust's decode() held the lock for its whole run)."""
    import threading
    import time
    longest = max(range(smollm.vocab_size), key=lambda i: len(smollm.token_bytes(i)))
    ids = [longest] * 131072
    window: list[float] = []

    def work() -> None:
        window.append(time.perf_counter())
        smollm.decode(ids, skip_special_tokens=False)
        window.append(time.perf_counter())

    thread = threading.Thread(target=work)
    thread.start()
    ticks = []  # when this thread ran, every millisecond it could
    while thread.is_alive():
        time.sleep(0.001)
        ticks.append(time.perf_counter())
    thread.join()
    begin, end = window
    points = [begin, *(t for t in ticks if begin < t < end), end]
    worst_gap = max(b - a for a, b in zip(points, points[1:]))
    assert worst_gap < (end - begin) / 2, (worst_gap, end - begin)
