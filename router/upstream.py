"""UpstreamConnection: a minimal HTTP/1.1 client as an asyncio Protocol, for the router's hop to a replica.

Why not httpx, nor asyncio streams: the router's whole job is to add nothing to TTFT, and each chunk
a replica writes must reach the client the moment it arrives. The response is parsed in C as its
bytes arrive (httptools, chunked framing included), straight from the transport's callback: no
StreamReader buffer, no search for the head's end in Python, no re-parsing of chunk sizes. What one
read from the socket held is handed on as one part, never held back for the next. It speaks only
what a ttft replica answers: a status line, headers, then a `Content-Length` or chunked body
(trailers are refused).

A streamed body can be handed on from the transport's own callback, with no task woken per part: a
`Relay` given with the request is offered the head as soon as it is parsed and, if it takes the body,
gets each part (what one read held) as it arrives, then the end or why there will be none.
"""
from __future__ import annotations

import asyncio
import time
from typing import AsyncIterator, Protocol

import httptools

# Headers that describe one hop, not the message (RFC 9110 7.6.1): never forwarded.
HOP_HEADERS = frozenset({b"connection", b"keep-alive", b"transfer-encoding", b"te", b"trailer",
                         b"upgrade", b"proxy-connection", b"content-length"})


class UpstreamError(Exception):
    """The replica closed, reset or sent something that is not HTTP/1.1."""


class Relay(Protocol):
    """Where a response's body goes straight from `data_received` (router/stream_relay.py)."""

    def head(self, status: int, headers: list[tuple[bytes, bytes]]) -> bool:
        """The status and end-to-end headers: True to take the body as it arrives."""

    def part(self, data: bytes, last: bool) -> None:
        """What one read held of the body (maybe empty with `last`)."""

    def lost(self, why: str) -> None:
        """No more of the body will come (or, before the head, no response will)."""


class UpstreamConnection(asyncio.Protocol):
    """One keep-alive connection to a replica; `reusable` once a response has been read whole."""

    def __init__(self) -> None:
        # Kept: asking for the running loop is a getpid() system call each time, twice per request.
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.reusable = False
        self.active_at = time.monotonic()  # last request written or bytes read: a silent one may be hung
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future | None = None
        self._lost: str | None = None  # why no more bytes will come
        self._expecting = False  # a request was sent and its response is not complete
        self._relay: Relay | None = None  # offered the head; kept only if it took the body
        self._relaying = False
        self._head_only = False  # the request was a HEAD: its response ends at its head
        self._reset()

    def _reset(self) -> None:
        self._headers: list[tuple[bytes, bytes]] = []
        self._end_headers: list[tuple[bytes, bytes]] = []  # without the hop-by-hop ones
        self._head_done = False
        self._keep_alive = False
        self._parts: list[bytes] = []
        self._done = False

    @classmethod
    async def open(cls, host: str, port: int, timeout_s: float) -> "UpstreamConnection":
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(loop.create_connection(cls, host, port), timeout_s)
        except (OSError, asyncio.TimeoutError) as exc:
            raise UpstreamError(f"cannot connect to {host}:{port}: {exc or 'timed out'}") from None
        return conn

    # -- transport callbacks ------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.active_at = time.monotonic()
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, ValueError) as exc:  # (a callback's error comes wrapped or not)
            error = f"the replica sent something that is not HTTP/1.1: {type(exc).__name__}"
        else:
            error = None
        if self._relaying and (self._parts or self._done):  # what came before an error is passed on too
            self._hand_on()
        if error is not None:
            self._fail(error)
            self.transport.abort()
        self._wake()

    def _hand_on(self) -> None:
        parts, self._parts = self._parts, []
        part = parts[0] if len(parts) == 1 else b"".join(parts)
        relay = self._relay
        if self._done:
            self.reusable = self._keep_alive and self._lost is None
            self._relay, self._relaying = None, False
        relay.part(part, self._done)

    def eof_received(self) -> bool:
        self._fail("the replica closed the connection")
        return False

    def connection_lost(self, exc) -> None:
        self._fail(f"the connection was lost: {type(exc).__name__}" if exc else "the connection was closed")

    def _fail(self, why: str) -> None:
        self.reusable = False
        if self._lost is None:
            self._lost = why
        relay = self._relay
        if relay is not None and (self._relaying or not self._head_done):
            self._relay, self._relaying = None, False
            relay.lost(self._lost)
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- httptools callbacks ------------------------------------------------------------------
    def on_message_begin(self) -> None:
        if not self._expecting:  # bytes past the end of a response: never reuse this connection
            self._fail("the replica sent more than one response")

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._head_done:
            raise ValueError("trailers after the last chunk")
        self._headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self._head_done = True
        self._keep_alive = self._parser.should_keep_alive()  # (after the message ends it says False)
        if self._head_only:
            # The parser cannot be told that no body follows a HEAD's head, so the response ends here
            # and the connection is not reused (its next bytes would be read as this body). The
            # length is the GET's, which the client is owed.
            self._end_headers = [(n, v) for n, v in self._headers if n not in HOP_HEADERS or n == b"content-length"]
            self._done, self._expecting, self._keep_alive = True, False, False
        else:
            self._end_headers = [(name, value) for name, value in self._headers if name not in HOP_HEADERS]
        if self._relay is not None:
            self._relaying = self._relay.head(self._parser.get_status_code(), self._end_headers)
            if not self._relaying:
                self._relay = None

    def on_body(self, body: bytes) -> None:
        self._parts.append(body)

    def on_message_complete(self) -> None:
        self._done = True
        self._expecting = False

    # -- the router's side --------------------------------------------------------------------
    def is_usable(self) -> bool:
        """Open, and nothing has gone wrong on it: an idle one may be given a request."""
        return self._lost is None and self.transport is not None and not self.transport.is_closing()

    def close(self) -> None:
        """Close now (also the way an abort reaches the replica: it sees the disconnect)."""
        self.reusable = False
        if self.transport is not None:
            self.transport.abort()

    def send(self, method: bytes, path: bytes, host: bytes, headers: list[tuple[bytes, bytes]],
             body: bytes, relay: Relay | None = None) -> None:
        """Write one request; `relay`, if given, is offered the response's head (see the module's doc)."""
        head = [method, b" ", path, b" HTTP/1.1\r\nhost: ", host, b"\r\n"]
        for name, value in headers:
            if name not in HOP_HEADERS and name != b"host":
                head += [name, b": ", value, b"\r\n"]
        head += [b"content-length: ", str(len(body)).encode(), b"\r\n\r\n", body]
        self._reset()
        self._relay, self._relaying = relay, False
        self._head_only = method == b"HEAD"
        self._expecting = True
        self.reusable = False
        self.transport.write(b"".join(head))
        self.active_at = time.monotonic()

    async def _wait(self) -> None:
        self._waiter = self.loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    async def read_head(self) -> tuple[int, list[tuple[bytes, bytes]]]:
        """The status and the end-to-end headers of the response."""
        while not self._head_done:
            if self._lost is not None:
                raise UpstreamError(f"no response from the replica: {self._lost}")
            await self._wait()
        return self._parser.get_status_code(), self._end_headers

    async def body_chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives (see `body_parts`), without the empty parts."""
        async for part, _ in self.body_parts():
            if part:
                yield part

    async def body_parts(self) -> AsyncIterator[tuple[bytes, bool]]:
        """The body as it arrives, one part per read from the socket (what the replica wrote at once
        is passed on in one write); True with the last part."""
        while True:
            if self._parts or self._done:
                parts, self._parts = self._parts, []
                part = parts[0] if len(parts) == 1 else b"".join(parts)
                if self._done:
                    self.reusable = self._keep_alive and self._lost is None
                    yield part, True
                    return
                yield part, False
                continue
            if self._lost is not None:
                raise UpstreamError(f"the replica's response ended early: {self._lost}")
            await self._wait()
