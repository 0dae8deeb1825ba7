"""PromptCodec: the template writes a chat's special tokens (never added twice, unless /tokenize asks),
a template that fails is the client's 400, and the characters of the contents decide where they run."""
from __future__ import annotations

import pytest

from ingress.chat_template import ChatTemplate
from ingress.dummy_tokenizer import DummyTokenizer
from ingress.prompt_codec import PromptCodec, content_chars
from protocol.errors import ApiError
from protocol.limits import IngressLimits
from protocol.requests.chat import parse_chat_request
from protocol.requests.tokenize import parse_tokenize_request

USER = [{"role": "user", "content": "hi"}]


def codec(template: str = "{{ messages[0]['content'] }}") -> PromptCodec:
    return PromptCodec(DummyTokenizer(512), ChatTemplate(template))


def test_chat_special_tokens_come_from_the_template_only_unless_tokenize_asks():
    c, limits = codec(), IngressLimits()
    chat = parse_chat_request({"messages": USER}, limits, 512)
    assert c.encode_chat(chat) == c.tokenizer.encode("hi", add_special_tokens=False)
    asked = parse_tokenize_request({"messages": USER, "add_special_tokens": True}, limits)
    assert c.encode_tokenize_chat(asked) == c.tokenizer.encode("hi", add_special_tokens=True)
    assert c.encode_text("hi") == c.tokenizer.encode("hi", add_special_tokens=True)
    assert c.decode_all([c.encode_text("hi")]) == [c.decode(c.encode_text("hi"))]


def test_a_template_failure_is_a_400_on_messages():
    with pytest.raises(ApiError) as err:
        codec("{{ raise_exception('nope') }}").render(USER, True, {})
    assert (err.value.status, err.value.param) == (400, "messages") and "nope" in err.value.message


def test_content_chars_counts_strings_and_text_parts():
    messages = [{"content": "abc"}, {"content": [{"text": "de"}, {"type": "image"}, "x"]}, {"content": None}]
    assert content_chars(messages) == 5
