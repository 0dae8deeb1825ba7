"""The llguidance backend over ttft's tokenizer bridge: each kind compiles, its matcher allows
exactly what the grammar allows (walked byte by byte with the dummy byte tokenizer), finishes on
EOS only, rolls back; bad specs are GrammarErrors with llguidance's message, not its state dump."""
from __future__ import annotations

import json

import pytest
import torch

from ingress.dummy_tokenizer import BOS_ID, EOS_ID, DummyTokenizer
from structured.backend import GrammarError, bitmask_words
from structured.grammar_text import choice_lark
from structured.llguidance_backend import LlguidanceBackend
from structured.tokenizer_bridge import ll_tokenizer

VOCAB = 512


def allowed(matcher) -> set[int]:
    bits = torch.zeros((1, bitmask_words(VOCAB)), dtype=torch.int32)
    matcher.fill_bitmask(bits, 0)
    return {i for i in range(VOCAB) if (int(bits[0, i // 32]) >> (i % 32)) & 1}


def feed(matcher, tokenizer, text: str) -> bool:
    return all(matcher.accept(t) for t in tokenizer.encode(text, add_special_tokens=False))


@pytest.mark.parametrize("kind, spec, good, bad", [
    ("json_schema", json.dumps({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
                                "additionalProperties": False}), '{"a":12}', '{"b":1}'),
    ("json_object", "", '{"x":[1,2]}', "[1]"),
    ("regex", r"[0-9]{3}-[a-z]+", "123-abc", "12-abc"),
    ("choice", json.dumps(["yes", "no"]), "no", "maybe"),
    ("grammar", 'start: "x" NUM\nNUM: /[0-9]+/\n', "x42", "y42"),
    ("grammar", 'root ::= "a" ("b" | "c")', "ac", "ad"),  # GBNF, converted to Lark
])
def test_each_kind_accepts_its_language_and_refuses_the_rest(backend, dummy_tokenizer, kind, spec, good, bad):
    grammar = backend.compile(kind, spec)
    matcher = grammar.matcher()
    assert feed(matcher, dummy_tokenizer, good)
    assert EOS_ID in allowed(matcher)
    assert not feed(grammar.matcher(), dummy_tokenizer, bad)


def test_the_mask_is_exactly_the_next_allowed_bytes(backend, dummy_tokenizer):
    matcher = backend.compile("choice", json.dumps(["cat", "cow", "dog"])).matcher()
    assert allowed(matcher) == {ord("c") + 3, ord("d") + 3}
    assert feed(matcher, dummy_tokenizer, "c")
    assert allowed(matcher) == {ord("a") + 3, ord("o") + 3}
    assert feed(matcher, dummy_tokenizer, "ow")
    assert allowed(matcher) == {EOS_ID}  # finished: only EOS
    assert matcher.is_finished() or matcher.accept(EOS_ID)


def test_rollback_returns_to_the_earlier_state(backend, dummy_tokenizer):
    matcher = backend.compile("regex", "ab|ac").matcher()
    assert feed(matcher, dummy_tokenizer, "ab")
    matcher.rollback(1)
    assert allowed(matcher) == {ord("b") + 3, ord("c") + 3}


def test_matchers_of_one_compile_are_independent(backend, dummy_tokenizer):
    grammar = backend.compile("regex", "[a-z]+")
    first, second = grammar.matcher(), grammar.matcher()
    assert feed(first, dummy_tokenizer, "abc")
    assert EOS_ID not in allowed(second)


@pytest.mark.parametrize("kind, spec, words", [
    ("json_schema", '{"type": "objectx"}', "objectx"),
    ("json_schema", "[1, 2]", "not a JSON object"),
    ("regex", "a(b", "unclosed group"),
    ("grammar", "start: foo", "unknown name"),
    ("grammar", 'root ::= "a', "GBNF"),
    ("choice", "[]", "non-empty list"),
])
def test_bad_specs_are_grammar_errors_that_say_why(backend, kind, spec, words):
    with pytest.raises(GrammarError) as info:
        backend.compile(kind, spec)
    assert words in str(info.value)
    assert "<state>" not in str(info.value)


def test_choice_strings_are_escaped_literals():
    assert choice_lark(json.dumps(['a"b', "c\\d"])) == 'start: "a\\"b" | "c\\\\d"\n'


def test_ids_past_the_tokenizer_and_special_tokens_are_never_text():
    ll = ll_tokenizer(DummyTokenizer(300), VOCAB)  # a model whose embedding table is padded past its tokenizer
    assert ll.vocab_size == VOCAB
    matcher = LlguidanceBackend(ll).compile("regex", r"[a-z<>/|_0-9 ]+").matcher()
    ids = allowed(matcher)
    assert ids and max(ids) < 300 and not {BOS_ID, EOS_ID} & ids  # "<s>", "</s>" are not text
