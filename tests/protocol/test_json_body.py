"""parse_json_body: 413 before parsing, 400 for anything that is not one JSON object."""
from __future__ import annotations

import orjson
import pytest

from protocol.errors import ApiError
from protocol.limits import IngressLimits
from protocol.json_body import parse_json_body

LIMITS = IngressLimits(max_body_bytes=1000)


@pytest.mark.parametrize(
    "body, status, fragment",
    [
        (b"", 400, "empty"),
        (b"{", 400, "Malformed JSON"),
        (b'{"a": 1,}', 400, "Malformed JSON"),
        (b"{}x", 400, "Malformed JSON"),
        (b"{'a': 1}", 400, "Malformed JSON"),
        (b'{"a": NaN}', 400, "NaN and Infinity"),
        (b'{"a": Infinity}', 400, "NaN and Infinity"),
        (b'{"a": -Infinity}', 400, "NaN and Infinity"),
        (b'{"a": 1e400}', 400, "NaN and Infinity"),
        (b'{"a": "\xff\xfe"}', 400, "UTF-8"),
        (b'{"a": "\xed\xa0\x80"}', 400, "UTF-8"),  # an encoded lone surrogate
        (b'{"a": "\\ud800"}', 400, "UTF-8"),  # an escaped lone surrogate
        (b"\xef\xbb\xbf{}", 400, "byte order mark"),
        (b"[" * 5000 + b"]" * 5000, 413, "too large"),
        (b"[" * 400 + b"]" * 400, 400, "array"),
        (b"[1, 2]", 400, "got an array"),
        (b'"text"', 400, "got a string"),
        (b"3", 400, "got a number"),
        (b"true", 400, "got a boolean"),
        (b"null", 400, "got null"),
        (b" " * 1001, 413, "1000 bytes"),
    ],
)
def test_bad_bodies(body, status, fragment):
    with pytest.raises(ApiError) as info:
        parse_json_body(body, LIMITS)
    err = info.value
    assert err.status == status
    assert err.param is None
    if fragment:
        assert fragment in err.message
    # The body is the OpenAI shape and never a traceback.
    assert set(orjson.loads(err.to_body())["error"]) == {"message", "type", "param", "code"}
    assert "Traceback" not in err.message and "0x" not in err.message


def test_deep_but_legal_nesting_parses():
    body = b'{"a":' * 100 + b"1" + b"}" * 100
    assert parse_json_body(body, IngressLimits())["a"]["a"]


def test_too_deep_nesting_is_400_not_a_crash():
    body = b'{"a":' + b"[" * 2000 + b"]" * 2000 + b"}"
    with pytest.raises(ApiError) as info:
        parse_json_body(body, IngressLimits())
    assert info.value.status == 400


def test_size_is_checked_before_parsing():
    # Malformed and too big: the size wins, so a huge body is never scanned.
    with pytest.raises(ApiError) as info:
        parse_json_body(b"{" * 2000, LIMITS)
    assert info.value.status == 413


def test_exactly_at_the_limit_parses():
    body = orjson.dumps({"x": "a" * (1000 - 8)})
    assert len(body) == 1000
    assert parse_json_body(body, LIMITS) == {"x": "a" * 992}


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview])
def test_accepts_bytes_like_without_decoding(wrap):
    body = '{"prompt": "héllo 😀 日本"}'.encode()
    assert parse_json_body(wrap(body), LIMITS) == {"prompt": "héllo 😀 日本"}


def test_duplicate_keys_last_wins_and_big_ints_survive():
    obj = parse_json_body(b'{"a": 1, "a": 2, "seed": 18446744073709551615}', LIMITS)
    assert obj == {"a": 2, "seed": 18446744073709551615}
