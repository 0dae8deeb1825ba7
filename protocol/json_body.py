"""Body bytes to a JSON object: the size limit first, then one orjson pass over the raw bytes.

orjson validates UTF-8 itself, so the body is never decoded to a str first (that would copy it and
scan it twice). orjson also rejects what the JSON grammar rejects and Python's json accepts: NaN,
Infinity, numbers that overflow a double, lone surrogates, nesting deeper than 1024.
"""
from __future__ import annotations

import orjson

from protocol.errors import bad_request, payload_too_large
from protocol.limits import IngressLimits

_JSON_TYPE_NAMES = {list: "an array", str: "a string", int: "a number", float: "a number",
                    bool: "a boolean", type(None): "null"}


def parse_json_body(body: bytes | bytearray | memoryview, limits: IngressLimits) -> dict:
    """The request body as a dict, or ApiError 413 (too large) / 400 (not a JSON object)."""
    num_bytes = len(body)
    if num_bytes > limits.max_body_bytes:
        raise payload_too_large(num_bytes, limits.max_body_bytes)
    if num_bytes == 0:
        raise bad_request("Request body is empty: expected a JSON object.", None)
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise bad_request(_describe_decode_error(body, exc), None) from None
    if type(obj) is not dict:
        kind = _JSON_TYPE_NAMES.get(type(obj), "not an object")
        raise bad_request(f"Request body must be a JSON object, got {kind}.", None)
    return obj


def _describe_decode_error(body: bytes | bytearray | memoryview, exc: orjson.JSONDecodeError) -> str:
    # orjson's own messages are precise ("line 1 column 7 (char 6)") and contain no addresses; we add
    # the likely cause where orjson's wording is about characters, not meaning.
    detail = str(exc)
    if "UTF-8" in detail or "surrogate" in detail:
        return f"Request body is not valid UTF-8 JSON: {detail}"
    if "infinity" in detail.lower() or (
        ("unexpected character" in detail or "no digit after sign" in detail)
        and _mentions_non_finite(body)
    ):
        return f"Malformed JSON: NaN and Infinity are not valid JSON numbers ({detail})."
    return f"Malformed JSON in request body: {detail}"


def _mentions_non_finite(body: bytes | bytearray | memoryview) -> bool:
    raw = bytes(body) if not isinstance(body, bytes) else body
    return b"NaN" in raw or b"Infinity" in raw
