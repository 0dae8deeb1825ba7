"""X-Request-Id: the client's id for a request (echoed back), or one the server makes."""
from __future__ import annotations

import uuid
from typing import Mapping

from protocol.errors import bad_request

MAX_REQUEST_ID_CHARS = 128


def new_request_id(prefix: str = "cmpl") -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def request_id_of(headers: Mapping[str, str], prefix: str) -> str:
    """The header's id (printable, at most 128 characters, else 400), or a new `<prefix>-<hex>`."""
    given = headers.get("x-request-id")
    if given:
        if len(given) > MAX_REQUEST_ID_CHARS or not given.isprintable():
            raise bad_request("X-Request-Id must be printable and at most 128 characters", "X-Request-Id")
        return given
    return new_request_id(prefix)
