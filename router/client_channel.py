"""ClientChannel: one request's response on a front connection, written synchronously.

The front server's ASGI `send` is a thin wrapper over it; the router also reaches it directly (the
scope's `extensions["ttft.channel"]`) so that a replica's chunk can be written to the client from the
upstream connection's data callback, with no task woken per chunk, and so that a client's disconnect
is a callback rather than a task per request waiting on `receive`.

Framing: the head is held until the first body part and written with it (a one-token stream leaves
in one write); without a `content-length` an HTTP/1.1 body is chunked, an HTTP/1.0 one ends with the
connection; a HEAD request gets the head only.
"""
from __future__ import annotations

from http import HTTPStatus
from typing import Callable


_REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}  # built once: HTTPStatus(n) is slow per response


def reason(status: int) -> bytes:
    """The status line's reason phrase ('' for a code HTTP does not name)."""
    return _REASONS.get(status, b"")


class ClientChannel:
    """The response side of one request: `start`, then `body` until `more` is False."""

    __slots__ = ("transport", "http_version", "is_head", "keep_alive", "head", "chunked", "started", "done",
                 "gone", "paused", "_on_gone", "_on_pause", "_on_resume")

    def __init__(self, transport, http_version: str, is_head: bool, keep_alive: bool) -> None:
        self.transport = transport
        self.http_version = http_version
        self.is_head = is_head
        self.keep_alive = keep_alive
        self.head = b""  # held until the first body part, then written with it
        self.chunked = False
        self.started = False
        self.done = False
        self.gone = False  # the client's connection is closed: writes are dropped
        self.paused = False  # the client's socket buffer is full
        self._on_gone: Callable[[], None] | None = None
        self._on_pause: Callable[[], None] | None = None
        self._on_resume: Callable[[], None] | None = None

    # -- writing ------------------------------------------------------------------------------
    def start(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        """The status and headers (names lower-case), held until the first body part."""
        lines = [b"HTTP/1.1 %d %s\r\n" % (status, reason(status))]
        has_length = False
        for name, value in headers:
            has_length |= name.lower() == b"content-length"
            lines.append(b"%s: %s\r\n" % (name, value))
        # HTTP/1.0 knows no chunks: a body of unknown length ends where the connection does
        self.chunked = not has_length and self.http_version == "1.1"
        if not has_length and not self.chunked:
            self.keep_alive = False
        if self.chunked:
            lines.append(b"transfer-encoding: chunked\r\n")
        if not self.keep_alive:
            lines.append(b"connection: close\r\n")
        lines.append(b"\r\n")
        self.head = b"".join(lines)
        self.started = True

    def body(self, data: bytes, more: bool) -> None:
        """One body part, written now (with the held head before the first); `more=False` ends it."""
        if self.gone or self.done:
            return
        if self.chunked:
            data = (b"%x\r\n%s\r\n" % (len(data), data) if data else b"") + (b"" if more else b"0\r\n\r\n")
        if self.is_head:
            data = b""
        if self.head:
            data, self.head = self.head + data, b""
        if not more:
            self.done = True
        if data:
            self.transport.write(data)

    # -- what the transport tells ---------------------------------------------------------------
    def on_gone(self, callback: Callable[[], None]) -> None:
        """Call `callback` once when the client's connection closes (at once if it already has)."""
        self._on_gone = callback
        if self.gone:
            callback()

    def on_flow(self, pause: Callable[[], None], resume: Callable[[], None]) -> None:
        """Call `pause` when the client's socket buffer fills and `resume` when it drains."""
        self._on_pause, self._on_resume = pause, resume
        if self.paused:
            pause()

    def lost(self) -> None:
        if not self.gone:
            self.gone = True
            if self._on_gone is not None:
                self._on_gone()

    def pause(self) -> None:
        self.paused = True
        if self._on_pause is not None:
            self._on_pause()

    def resume(self) -> None:
        self.paused = False
        if self._on_resume is not None:
            self._on_resume()
