"""X-Request-Id: the client's id for a request (echoed back), or one the server makes.

HTTP hands header values over as bytes, which the ASGI server decodes as Latin-1; a client's id is
UTF-8 text, so it is read back from those bytes as UTF-8 (the id in the reply's body is then the
client's text), and written back into the reply's header as the same bytes it came in.
"""
from __future__ import annotations

import uuid
from typing import Mapping

from protocol.errors import bad_request

MAX_REQUEST_ID_CHARS = 128
_RULE = "X-Request-Id must be printable UTF-8 text of at most 128 characters"


def new_request_id(prefix: str = "cmpl") -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def request_id_of(headers: Mapping[str, str], prefix: str) -> str:
    """The header's id (printable UTF-8, at most 128 characters, else 400), or a new `<prefix>-<hex>`."""
    given = headers.get("x-request-id")
    if given:
        try:
            given = given.encode("latin-1").decode("utf-8")
        except (UnicodeEncodeError, UnicodeDecodeError):
            raise bad_request(_RULE, "X-Request-Id") from None
        if len(given) > MAX_REQUEST_ID_CHARS or not given.isprintable():
            raise bad_request(_RULE, "X-Request-Id")
        return given
    return new_request_id(prefix)


def request_id_header(request_id: str) -> str:
    """The id as a header value: its UTF-8 bytes, as the Latin-1 text the ASGI server encodes back."""
    return request_id.encode("utf-8").decode("latin-1")
