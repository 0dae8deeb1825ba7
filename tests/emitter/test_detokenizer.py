"""IncrementalDetokenizer against transformers' decode of SmolLM2's tokenizer, plus exact cases."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emitter.detokenizer import IncrementalDetokenizer

MIXED_TEXTS = [
    "Hello 😀 world",
    "世界你好，こんにちは 🇫🇷 👨‍👩‍👧",
    "naïve café — “quotes” ∑ x² 🎉🎉",
    "  leading spaces\n\ttabs and\r\nnewlines 🫠",
]

# Every proper prefix of a valid UTF-8 encoding (a character still waiting for bytes). Characters
# that differ only in their low 6 bits share every prefix but the full one, so one per 64 suffices.
_INCOMPLETE_TAILS = frozenset(
    chr(c).encode()[:k]
    for c in range(0x80, 0x110000, 64)
    if not 0xD800 <= c <= 0xDFFF
    for k in range(1, len(chr(c).encode()))
)


def ends_incomplete(data: bytes) -> bool:
    return any(data[-k:] in _INCOMPLETE_TAILS for k in (1, 2, 3) if len(data) >= k)


def stream(tok, ids, cuts=None, skip_special_tokens=True) -> list[str]:
    """Pushes ids in chunks (one token at a time by default); returns the pieces, finish last."""
    detok = IncrementalDetokenizer(tok, skip_special_tokens)
    cuts = cuts if cuts is not None else list(range(1, len(ids)))
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(ids))), len(ids)]
    pieces = [detok.push(ids[a:b]) for a, b in zip(bounds, bounds[1:])]
    pieces.append(detok.finish())
    return pieces


def expected_text(tok, ids, skip_special_tokens=True) -> str:
    """transformers' decode, minus the U+FFFD it gives an incomplete character at the very end."""
    ref = tok.decode(ids, skip_special_tokens=skip_special_tokens)
    data = b"".join(
        tok.token_bytes(i) for i in ids if not (skip_special_tokens and tok.is_special(i))
    )
    if ends_incomplete(data):
        assert ref.endswith("\ufffd")
        ref = ref[:-1]
    return ref


@pytest.mark.parametrize("text", MIXED_TEXTS)
def test_one_token_at_a_time_round_trips_and_never_splits_a_character(smol, text):
    ids = smol.encode(text, add_special_tokens=False)
    pieces = stream(smol, ids)
    assert "".join(pieces) == text == smol.decode(ids)
    assert all("\ufffd" not in p for p in pieces)
    # Some character really was split over tokens (a token alone decodes to U+FFFD).
    assert any("\ufffd" in smol.token_bytes(i).decode("utf-8", "replace") for i in ids)


def test_emoji_split_over_tokens_comes_out_once_complete(smol):
    ids = smol.encode("A😀", add_special_tokens=False)
    assert len(ids) >= 3  # "A" then the emoji's 4 bytes over at least 2 tokens
    detok = IncrementalDetokenizer(smol)
    outs = [detok.push([i]) for i in ids]
    assert outs[0] == "A"
    assert outs[1:-1] == [""] * (len(ids) - 2)
    assert outs[-1] == "😀"


def test_incomplete_character_at_the_end_is_dropped(smol):
    ids = smol.encode("ok 世界", add_special_tokens=False)
    truncated = ids[:-1]  # the last token completes "界"
    ref = smol.decode(truncated)
    assert ref.endswith("\ufffd")
    detok = IncrementalDetokenizer(smol)
    text = "".join(detok.push([i]) for i in truncated)
    assert detok.num_pending_bytes > 0
    assert detok.finish() == ""
    assert text == ref[:-1] and "\ufffd" not in text


def test_special_tokens_skipped_or_kept(smol):
    ids = [1, *smol.encode("Hi there", add_special_tokens=False), 2, 0, 3]
    assert "".join(stream(smol, ids)) == smol.decode(ids, skip_special_tokens=True) == "Hi there"
    kept = "".join(stream(smol, ids, skip_special_tokens=False))
    assert kept == smol.decode(ids, skip_special_tokens=False)
    assert kept == "<|im_start|>Hi there<|im_end|><|endoftext|><repo_name>"


def test_special_between_the_bytes_of_a_character_is_skipped(byte_tok):
    emoji = "😀".encode()
    ids = [emoji[0], emoji[1], byte_tok.EOS, emoji[2], emoji[3]]
    assert "".join(stream(byte_tok, ids)) == "😀"
    # Kept, the special interrupts the character: the lead part is one U+FFFD, then one per
    # lone continuation byte.
    kept = "".join(stream(byte_tok, ids, skip_special_tokens=False))
    assert kept == "\ufffd<|endoftext|>\ufffd\ufffd" == byte_tok.decode(ids, skip_special_tokens=False)


@pytest.mark.parametrize(
    "data, text",
    [
        (b"\x80", "\ufffd"),  # lone continuation byte
        (b"\xe4\xb8A", "\ufffdA"),  # truncated 3-byte char, then ASCII: one U+FFFD
        (b"\xed\xa0\x80", "\ufffd" * 3),  # encoded surrogate
        (b"\xf4\x90\x80\x80", "\ufffd" * 4),  # above U+10FFFF
        (b"\xe0\x80\x80", "\ufffd" * 3),  # overlong
        (b"A\xf0\x9f\x98", "A"),  # incomplete at the end: dropped, not U+FFFD
    ],
)
def test_invalid_bytes_match_transformers(smol, data, text):
    byte_id = {smol.token_bytes(i): i for i in range(smol.vocab_size) if not smol.is_special(i)}
    ids = [byte_id[bytes([b])] for b in data]
    assert "".join(stream(smol, ids)) == text == expected_text(smol, ids)


def test_push_costs_only_the_new_tokens(smol):
    """No re-decoding: each push reads exactly its own tokens' bytes and never calls decode."""
    ids = smol.encode("A long reply " * 50, add_special_tokens=False)

    class NoDecode:
        def __getattr__(self, name):
            if name == "decode":
                raise AssertionError("decode called")
            return getattr(smol, name)

    detok = IncrementalDetokenizer(NoDecode())
    before = smol.num_token_bytes_calls
    for n, i in enumerate(ids, 1):
        detok.push([i])
        assert smol.num_token_bytes_calls - before == n


def test_push_after_finish_is_a_bug(byte_tok):
    detok = IncrementalDetokenizer(byte_tok)
    detok.finish()
    with pytest.raises(AssertionError):
        detok.push([65])


@st.composite
def id_sequences(draw, vocab_size: int, byte_ids: list[int], tricky_ids: list[int]):
    one = st.one_of(
        st.integers(0, vocab_size - 1),
        st.sampled_from(byte_ids),  # single bytes: invalid and partial sequences
        st.sampled_from(tricky_ids),  # pieces of emoji / CJK
        st.integers(0, 16),  # specials
    )
    ids = draw(st.lists(one, max_size=40))
    cuts = draw(st.lists(st.integers(1, max(1, len(ids) - 1)), max_size=10))
    return ids, cuts


@pytest.fixture(scope="module")
def smol_id_pools(smol):
    byte_ids = [i for i in range(smol.vocab_size) if len(smol.token_bytes(i)) == 1]
    tricky = sorted({i for t in MIXED_TEXTS for i in smol.encode(t, add_special_tokens=False)})
    return byte_ids, tricky


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), skip=st.booleans())
def test_pushes_concatenate_to_transformers_decode(smol, smol_id_pools, data, skip):
    ids, cuts = data.draw(id_sequences(smol.vocab_size, *smol_id_pools))
    pieces = stream(smol, ids, cuts, skip_special_tokens=skip)
    assert "".join(pieces) == expected_text(smol, ids, skip_special_tokens=skip)
    assert "".join(stream(smol, ids, skip_special_tokens=skip)) == "".join(pieces)  # cut-independent


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=60))
def test_random_text_round_trips_one_token_at_a_time(smol, text):
    ids = smol.encode(text, add_special_tokens=False)
    pieces = stream(smol, ids)
    # (Not always == text: the vocabulary lacks some bytes, e.g. F1 (U+40000 starts with it).)
    assert "".join(pieces) == smol.decode(ids)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), skip=st.booleans())
def test_push_one_is_push_of_one_token(smol, smol_id_pools, data, skip):
    """The per-token fast path gives exactly what push((id,)) gives, pending bytes included."""
    ids, _ = data.draw(id_sequences(smol.vocab_size, *smol_id_pools))
    a, b = IncrementalDetokenizer(smol, skip), IncrementalDetokenizer(smol, skip)
    for i in ids:
        assert a.push_one(i) == b.push((i,))
        assert a.num_pending_bytes == b.num_pending_bytes


def test_streams_of_one_tokenizer_share_whole_character_texts_and_never_misuse_them(byte_tok):
    """push_one serves a token's text from a table shared by the tokenizer's streams only when no
    partial character is pending: a continuation byte seen alone (U+FFFD) still completes the
    character another stream has pending."""
    first, second = IncrementalDetokenizer(byte_tok), IncrementalDetokenizer(byte_tok)
    assert [first.push_one(t) for t in (0x41, 0x80, 0x41)] == ["A", "\ufffd", "A"]
    calls: list[int] = []
    token_bytes = byte_tok.token_bytes
    byte_tok.token_bytes = lambda t: calls.append(t) or token_bytes(t)
    assert [second.push_one(t) for t in (0x41, 0xC3, 0x80, 0x80)] == ["A", "", "\u00c0", "\ufffd"]
    assert calls == [0xC3, 0x80]  # "A" and the lone 0x80 came from the table
    keep = IncrementalDetokenizer(byte_tok, skip_special_tokens=False)  # its own table
    assert keep.push_one(byte_tok.EOS) == "<|endoftext|>" and first.push_one(byte_tok.EOS) == ""


def test_a_tokenizer_without_weak_references_gets_a_table_per_stream(byte_tok):
    class Slotted:
        __slots__ = ()
        is_special = staticmethod(byte_tok.is_special)
        token_bytes = staticmethod(byte_tok.token_bytes)

    tok = Slotted()
    a, b = IncrementalDetokenizer(tok), IncrementalDetokenizer(tok)
    assert a.push_one(0x41) == "A" and b.push_one(0x41) == "A"
    assert a._texts == {0x41: "A"} and a._texts is not b._texts
