"""`/debug/traces?request_id=...`: the traces of one request, the parameter checked first.

A request of n choices (or a batch of prompts) has one trace per sequence, `<id>-<i>`
(pipeline/samples.py); asking for `<id>` gives them all, asking for `<id>-<i>` gives that one.
"""
from __future__ import annotations

from typing import Iterable

from protocol.errors import bad_request
from protocol.request_id import MAX_REQUEST_ID_CHARS
from stages.trace import RequestTrace


def checked_request_id(value: str) -> str:
    """The parameter as a request id, or a 400 naming it (the rule X-Request-Id follows)."""
    if not value or len(value) > MAX_REQUEST_ID_CHARS or not value.isprintable():
        raise bad_request(f"request_id must be printable text of 1 to {MAX_REQUEST_ID_CHARS} characters",
                          "request_id")
    return value


def traces_of(traces: Iterable[RequestTrace], request_id: str) -> list[RequestTrace]:
    """The request's own trace, or its sequences' traces."""
    prefix = request_id + "-"
    return [t for t in traces
            if t.request_id == request_id or (t.request_id.startswith(prefix) and _is_branch(t.request_id[len(prefix):]))]


def _is_branch(suffix: str) -> bool:
    return all(part.isdigit() for part in suffix.split("-"))
