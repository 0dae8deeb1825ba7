"""`ttft bench --extra-body-preset`: each preset is a body the server accepts as structured output
(parsed by the protocol room on both endpoints, compiled by the grammar backend), --extra-body's
keys win over the preset's, and a bad --extra-body is an error naming the flag."""
from __future__ import annotations

import argparse

import pytest

from bench.cli import add_bench_arguments
from bench.extra_body import STRUCTURED_PRESETS, extra_body
from ingress.dummy_tokenizer import DummyTokenizer
from protocol.limits import IngressLimits
from protocol.requests.chat import parse_chat_request
from protocol.requests.completion import parse_completion_request
from structured.llguidance_backend import LlguidanceBackend
from structured.tokenizer_bridge import ll_tokenizer


def args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_bench_arguments(parser)
    return parser.parse_args(argv)


@pytest.mark.parametrize("name", list(STRUCTURED_PRESETS))
def test_each_preset_is_structured_output_the_server_compiles(name):
    body = extra_body(args("--extra-body-preset", name))
    backend = LlguidanceBackend(ll_tokenizer(DummyTokenizer(512)))
    chat = parse_chat_request({"messages": [{"role": "user", "content": "x"}], **body}, IngressLimits(), 512)
    completion = parse_completion_request({"prompt": "x", **body}, IngressLimits(), 512)
    assert chat.params.structured == completion.params.structured is not None
    backend.compile(chat.params.structured.kind, chat.params.structured.spec)


def test_extra_body_keys_win_over_the_preset():
    body = extra_body(args("--extra-body-preset", "regex", "--extra-body", '{"structured_outputs": {"regex": "a"}, '
                                                                           '"top_k": 5}'))
    assert body == {"structured_outputs": {"regex": "a"}, "top_k": 5}
    assert extra_body(args()) == {}


@pytest.mark.parametrize("text, words", [("{nope", "not valid JSON"), ("[1]", "must be a JSON object")])
def test_a_bad_extra_body_names_the_flag(text, words):
    with pytest.raises(ValueError) as info:
        extra_body(args("--extra-body", text))
    assert str(info.value).startswith("--extra-body:") and words in str(info.value)


def test_an_unknown_preset_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        args("--extra-body-preset", "xml")
    assert info.value.code == 2 and "--extra-body-preset" in capsys.readouterr().err


def test_the_json_schema_preset_keeps_a_stream_inside_its_array():
    """A random model cannot close the array at once (then only EOS would follow: no constrained
    decoding left to measure)."""
    tokenizer = DummyTokenizer(512)
    body = extra_body(args("--extra-body-preset", "json_schema"))
    structured = parse_completion_request({"prompt": "x", **body}, IngressLimits(), 512).params.structured
    matcher = LlguidanceBackend(ll_tokenizer(tokenizer)).compile(structured.kind, structured.spec).matcher()
    one_item = '[{"name":"a","count":1},'
    for token in tokenizer.encode(one_item, add_special_tokens=False):
        assert matcher.accept(token)
    close = tokenizer.encode("]", add_special_tokens=False)[0]
    assert not matcher.is_finished()
    assert not matcher.accept(close)
