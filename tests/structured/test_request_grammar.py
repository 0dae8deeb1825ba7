"""RequestGrammar: it reads a sequence's output ids once each, applies only after its opening ids
(a reasoning parser's `</think>`), and stops constraining after a token its grammar refused."""
from __future__ import annotations

import json

import torch

from ingress.dummy_tokenizer import EOS_ID
from structured.backend import bitmask_words
from structured.request_grammar import RequestGrammar

VOCAB = 512


def ids(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


def allows(grammar: RequestGrammar, token: int) -> bool:
    bits = torch.zeros((1, bitmask_words(VOCAB)), dtype=torch.int32)
    grammar.fill(bits, 0)
    return bool((int(bits[0, token // 32]) >> (token % 32)) & 1)


def test_catch_up_reads_each_id_once(backend, dummy_tokenizer):
    grammar = RequestGrammar(backend.compile("choice", json.dumps(["abc"])))
    out: list[int] = []
    for token in ids(dummy_tokenizer, "abc"):
        out.append(token)
        grammar.catch_up(out)
        grammar.catch_up(out)  # nothing new: nothing read twice
    assert grammar.num_read == 3 and grammar.constrains
    assert allows(grammar, EOS_ID) and not allows(grammar, ids(dummy_tokenizer, "a")[0])


def test_the_grammar_applies_after_the_opening_ids_only(backend, dummy_tokenizer):
    opening = tuple(ids(dummy_tokenizer, "</t>"))
    grammar = RequestGrammar(backend.compile("regex", "[0-9]+"), after_token_ids=opening)
    out = ids(dummy_tokenizer, "thinking </t")
    grammar.catch_up(out)
    assert not grammar.constrains  # free text so far
    out += ids(dummy_tokenizer, ">")
    grammar.catch_up(out)
    assert grammar.constrains and not allows(grammar, ids(dummy_tokenizer, "x")[0])
    out += ids(dummy_tokenizer, "42")
    grammar.catch_up(out)
    assert grammar.constrains and allows(grammar, EOS_ID) and not grammar.rejected


def test_a_refused_token_stops_the_constraint(backend, dummy_tokenizer):
    grammar = RequestGrammar(backend.compile("regex", "[0-9]+"))
    grammar.catch_up(ids(dummy_tokenizer, "4x"))
    assert grammar.rejected and not grammar.constrains
