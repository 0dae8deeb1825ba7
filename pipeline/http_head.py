"""The limits on what a connection may send before its request's headers are complete, and the
refusals written straight to the transport when it sends more (pipeline/http_protocol.py).

A refusal is an HTTP response in ttft's error shape (protocol/errors.py), written by the protocol
before the request reaches the app: the app never sees a request whose head broke a limit, and
the bytes past the limit are never parsed.
"""
from __future__ import annotations

import http
from dataclasses import dataclass

from protocol.errors import INVALID_REQUEST, ApiError

# What a request line adds to its URL: method, spaces, "HTTP/1.1", CRLFs (and the blank line).
REQUEST_LINE_BYTES = 32
# Wire bytes of a header line beyond its name and value: ": " and CRLF.
HEADER_LINE_OVERHEAD = 4


@dataclass(frozen=True)
class ConnectionLimits:
    """Per-connection limits (the `ttft serve` flags of the same names) and the connection cap."""
    header_read_timeout_s: float = 10.0
    max_headers: int = 100
    max_header_bytes: int = 64 * 1024
    max_url_bytes: int = 8 * 1024
    # Connections (or requests being answered) past which a request gets our 503; probes get
    # `num_probe_slots` more, counted in requests, so that silent sockets never starve them.
    max_open_connections: int = 2 * 4096 + 16
    num_probe_slots: int = 64

    @property
    def max_head_bytes(self) -> int:
        """Raw bytes of a request head (request line and header lines) that can still be within limits."""
        return self.max_url_bytes + self.max_header_bytes + REQUEST_LINE_BYTES

    @property
    def min_checked_head_bytes(self) -> int:
        """A head that arrived in fewer bytes than this is within the URL and header-bytes limits."""
        return min(self.max_url_bytes, self.max_header_bytes)


class HeadTooLarge(Exception):
    """Raised from a parser callback to stop parsing at once; carries the refusal (httptools hands
    it back as the context of its HttpParserCallbackError)."""

    def __init__(self, error: ApiError) -> None:
        super().__init__(error.message)
        self.error = error


def headers_too_large(what: str) -> ApiError:
    return ApiError(431, f"Request header fields too large: {what}.", INVALID_REQUEST, None,
                    "request_header_fields_too_large")


def too_many_headers(max_headers: int) -> ApiError:
    return headers_too_large(f"more than {max_headers} headers")


def too_many_header_bytes(max_header_bytes: int) -> ApiError:
    return headers_too_large(f"more than {max_header_bytes} bytes of headers")


def url_too_long(max_url_bytes: int) -> ApiError:
    return ApiError(414, f"URI too long: the limit is {max_url_bytes} bytes.", INVALID_REQUEST, None,
                    "uri_too_long")


def head_refusal(url: bytes, headers: list[tuple[bytes, bytes]], limits: ConnectionLimits) -> ApiError | None:
    """The refusal of a complete request head that breaks a limit, else None."""
    if len(url) > limits.max_url_bytes:
        return url_too_long(limits.max_url_bytes)
    if len(headers) > limits.max_headers:
        return too_many_headers(limits.max_headers)
    if sum(len(name) + len(value) for name, value in headers) + HEADER_LINE_OVERHEAD * len(headers) \
            > limits.max_header_bytes:
        return too_many_header_bytes(limits.max_header_bytes)
    return None


def raw_error_response(err: ApiError, default_headers: list[tuple[bytes, bytes]]) -> bytes:
    """The whole response for `err`, ending the connection (`Connection: close`)."""
    body = err.to_body()
    lines = [b"HTTP/1.1 %d %s\r\n" % (err.status, http.HTTPStatus(err.status).phrase.encode())]
    lines += [name + b": " + value + b"\r\n" for name, value in default_headers]
    lines += [b"%s: %s\r\n" % (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in err.headers.items()]
    lines += [b"content-type: application/json\r\n", b"content-length: %d\r\n" % len(body),
              b"connection: close\r\n\r\n", body]
    return b"".join(lines)
