"""DummyTokenizer: byte ids for any vocab size, exact round trips, consistent decode/token_bytes."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from ingress.chat_template import ChatTemplate
from ingress.dummy_tokenizer import BOS_ID, EOS_ID, PAD_ID, DummyTokenizer


@pytest.mark.parametrize("vocab_size", [300, 512, 49152, 152064])
def test_layout_for_any_vocab_size(vocab_size):
    tok = DummyTokenizer(vocab_size)
    assert tok.vocab_size == vocab_size
    assert tok.encode("A") == [BOS_ID, ord("A") + 3]
    assert tok.token_bytes(3) == b"\x00" and tok.token_bytes(258) == b"\xff"
    assert tok.token_bytes(259) == b" t259" and tok.token_bytes(vocab_size - 1) == f" t{vocab_size - 1}".encode()
    assert [tok.is_special(i) for i in (0, 1, 2, 3, vocab_size - 1)] == [True, True, True, False, False]
    assert tok.bos_token_id == BOS_ID and tok.eos_token_ids == frozenset({EOS_ID}) and tok.add_bos


def test_too_small_vocab_is_rejected():
    with pytest.raises(ValueError, match="vocab_size >= 300"):
        DummyTokenizer(299)


@given(st.text())
def test_round_trip(text):
    tok = DummyTokenizer(512)
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text.replace("<s>", "").replace("</s>", "").replace("<pad>", "")
    assert b"".join(tok.token_bytes(i) for i in ids) == text.encode("utf-8")
    assert all(0 <= i < 512 for i in ids)


def test_special_token_text_is_parsed():
    tok = DummyTokenizer(300)
    assert tok.encode("a</s>b<pad>", add_special_tokens=False) == [ord("a") + 3, EOS_ID, ord("b") + 3, PAD_ID]
    ids = tok.encode("<s>x")
    assert ids == [BOS_ID, BOS_ID, ord("x") + 3]
    assert tok.decode(ids) == "x" and tok.decode(ids, skip_special_tokens=False) == "<s><s>x"


def test_decode_of_filler_ids_and_broken_utf8():
    tok = DummyTokenizer(400)
    assert tok.decode([300, 301, EOS_ID]) == " t300 t301"
    assert tok.decode([0xE4 + 3, 0xBD + 3]) == "\ufffd"  # an incomplete character decodes lossy
    with pytest.raises(ValueError):
        tok.token_bytes(400)


def test_chat_template_renders():
    tok = DummyTokenizer(300)
    out = ChatTemplate(tok.chat_template, tok.bos_token, tok.eos_token).render(
        [{"role": "user", "content": "hi"}])
    assert out == "user: hi\nassistant:"
