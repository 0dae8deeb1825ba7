"""JSON responses serialised once with orjson, and the OpenAI error shape for ApiError."""
from __future__ import annotations

import orjson
from starlette.responses import Response

from protocol.errors import ApiError


def json_response(obj: object, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(obj), status_code=status, headers=headers, media_type="application/json")


def error_response(err: ApiError, headers: dict[str, str] | None = None) -> Response:
    merged = dict(err.headers or {})
    if headers:
        merged.update(headers)
    return Response(err.to_body(), status_code=err.status, headers=merged, media_type="application/json")
