"""ApiError: every error a client can see, as a value with its HTTP status and OpenAI-style body.

The body shape is `{"error": {"message", "type", "param", "code"}}` (see RELIABILITY.md). Messages
are written by us and name the offending field; they never carry a traceback or a memory address,
so the HTTP layer can send `to_body()` as it is.
"""
from __future__ import annotations

import math

import orjson

INVALID_REQUEST = "invalid_request_error"
AUTHENTICATION = "authentication_error"
NOT_FOUND = "not_found_error"
OVERLOADED = "overloaded_error"
SERVER = "server_error"


class ApiError(Exception):
    """A request that ends in an error response. Raised by the synchronous cores, answered by HTTP."""

    __slots__ = ("status", "message", "type", "param", "code", "headers")

    def __init__(
        self,
        status: int,
        message: str,
        type: str = INVALID_REQUEST,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers if headers is not None else {}

    def to_dict(self) -> dict:
        return {
            "error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}
        }

    def to_body(self) -> bytes:
        return orjson.dumps(self.to_dict())

    def __repr__(self) -> str:
        return f"ApiError({self.status}, {self.message!r}, param={self.param!r}, code={self.code!r})"


def bad_request(message: str, param: str | None, code: str | None = None) -> ApiError:
    return ApiError(400, message, INVALID_REQUEST, param, code)


def context_length_exceeded(message: str, param: str | None = "messages") -> ApiError:
    return ApiError(400, message, INVALID_REQUEST, param, "context_length_exceeded")


def unauthorized(message: str = "Invalid or missing API key.") -> ApiError:
    # The bearer scheme: a client learns how to authenticate (RFC 6750).
    return ApiError(401, message, AUTHENTICATION, None, "invalid_api_key", {"WWW-Authenticate": "Bearer"})


def not_found(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(404, message, NOT_FOUND, param, code)


def model_not_found(model: str, served: str) -> ApiError:
    shown = model if len(model) <= 100 else model[:100] + "..."
    return not_found(
        f"The model '{shown}' does not exist; this server serves '{served}'.", "model", "model_not_found"
    )


def check_model(requested: str | None, served: str) -> None:
    """404 unless the request names no model or the one served."""
    if requested is not None and requested != served:
        raise model_not_found(requested, served)


def payload_too_large(num_bytes: int | None, max_bytes: int) -> ApiError:
    got = f" ({num_bytes} bytes)" if num_bytes is not None else ""
    return ApiError(
        413, f"Request body is too large{got}: the limit is {max_bytes} bytes.", INVALID_REQUEST, None,
        "payload_too_large",
    )


def overloaded(retry_after_s: float, message: str = "The server is overloaded; retry later.",
               status: int = 503) -> ApiError:
    """503 (or 429) with Retry-After in whole seconds, rounded up and at least 1 (RFC 9110)."""
    seconds = max(1, math.ceil(retry_after_s)) if math.isfinite(retry_after_s) else 1
    return ApiError(status, message, OVERLOADED, None, "overloaded", {"Retry-After": str(seconds)})


def internal_error(message: str = "Internal server error.") -> ApiError:
    """Our own fault. The message is fixed text: never str(exc) of an unexpected exception."""
    return ApiError(500, message, SERVER, None, "internal_error")
