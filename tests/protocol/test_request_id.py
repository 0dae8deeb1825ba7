"""X-Request-Id: a client's UTF-8 id is read as its text (the ASGI server hands it over as Latin-1)
and written back as its bytes; anything else a client sends there is a 400 naming the header."""
from __future__ import annotations

import pytest

from protocol.errors import ApiError
from protocol.request_id import MAX_REQUEST_ID_CHARS, request_id_header, request_id_of


def as_asgi(raw: bytes) -> dict[str, str]:
    """The header as Starlette presents it: the bytes decoded as Latin-1."""
    return {"x-request-id": raw.decode("latin-1")}


@pytest.mark.parametrize("text", ["trace-me-1", "zürich", "東京-🙂", "é" * MAX_REQUEST_ID_CHARS])
def test_a_utf8_id_is_its_text_and_goes_back_as_its_bytes(text):
    rid = request_id_of(as_asgi(text.encode("utf-8")), "cmpl")
    assert rid == text
    assert request_id_header(rid).encode("latin-1") == text.encode("utf-8")


@pytest.mark.parametrize("raw", [b"caf\xe9", b"a\x00b", "é".encode() * (MAX_REQUEST_ID_CHARS + 1), b"\xff\xfe"])
def test_other_ids_are_a_400_on_the_header(raw):
    with pytest.raises(ApiError) as err:
        request_id_of(as_asgi(raw), "cmpl")
    assert (err.value.status, err.value.param) == (400, "X-Request-Id")


def test_no_id_gets_a_new_one_with_the_prefix():
    assert request_id_of({}, "chatcmpl").startswith("chatcmpl-")
