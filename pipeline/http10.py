"""CloseDelimitedCycle: an HTTP/1.0 request's response, never in chunked coding.

HTTP/1.0 has no chunked transfer coding (RFC 9112 §7: a server must not send it to a 1.0 client),
but uvicorn frames every response without a Content-Length that way. A 1.0 client's connection
never stays open (uvicorn keeps none alive for 1.0), so a response without a Content-Length (a
stream) is delimited by closing the connection; one with a Content-Length keeps it.
"""
from __future__ import annotations

from uvicorn._types import ASGISendEvent
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle


def has_content_length(message: ASGISendEvent) -> bool:
    return any(name.lower() == b"content-length" for name, _ in message.get("headers", ()))


class CloseDelimitedCycle(RequestResponseCycle):
    """A request-response cycle that sends a body without Content-Length as it is, then closes."""

    delimited_by_close = False

    async def send(self, message: ASGISendEvent) -> None:
        if message["type"] == "http.response.start" and not self.response_started:
            if not has_content_length(message):
                # Set before uvicorn writes the head: it then adds no Transfer-Encoding, and
                # `Connection: close` since a 1.0 connection is not kept alive.
                self.chunked_encoding = False
                self.delimited_by_close = True
        elif self.delimited_by_close and message["type"] == "http.response.body" and not self.response_complete:
            # uvicorn counts an unchunked body against its Content-Length: this message is what
            # is left, so the last one completes the response (and closes the connection).
            self.expected_content_length = len(message.get("body", b""))
        await super().send(message)
