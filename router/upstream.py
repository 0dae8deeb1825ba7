"""UpstreamConnection: a minimal HTTP/1.1 client over asyncio streams, for the router's hop to a replica.

Why not httpx: the router's whole job is to add nothing to TTFT, and each chunk a replica writes
must reach the client the moment it arrives. A raw keep-alive connection writes the request in one
call and hands back each chunk of a chunked body as soon as it is read, with no pool machinery,
no per-chunk objects and no buffering between the replica's flush and ours. It speaks only what a
ttft replica answers: a status line, headers, then a `Content-Length` or chunked body.
"""
from __future__ import annotations

import asyncio
import time
from typing import AsyncIterator

# Headers that describe one hop, not the message (RFC 9110 7.6.1): never forwarded.
HOP_HEADERS = frozenset({b"connection", b"keep-alive", b"transfer-encoding", b"te", b"trailer",
                         b"upgrade", b"proxy-connection", b"content-length"})


class UpstreamError(Exception):
    """The replica closed, reset or sent something that is not HTTP/1.1."""


class UpstreamConnection:
    """One keep-alive connection to a replica; `reusable` once a response has been read whole."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.reusable = False
        self._chunked = False
        self._remaining = 0  # body bytes left when the length is known
        self.active_at = time.monotonic()  # last request written or bytes read: a silent one may be hung

    @classmethod
    async def open(cls, host: str, port: int, timeout_s: float) -> "UpstreamConnection":
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
        except (OSError, asyncio.TimeoutError) as exc:
            raise UpstreamError(f"cannot connect to {host}:{port}: {exc or 'timed out'}") from None
        return cls(reader, writer)

    def close(self) -> None:
        """Close now (also the way an abort reaches the replica: it sees the disconnect)."""
        self.reusable = False
        self.writer.transport.abort()

    def send(self, method: bytes, path: bytes, host: bytes, headers: list[tuple[bytes, bytes]],
             body: bytes) -> None:
        head = [method, b" ", path, b" HTTP/1.1\r\nhost: ", host, b"\r\n"]
        for name, value in headers:
            if name not in HOP_HEADERS and name != b"host":
                head += [name, b": ", value, b"\r\n"]
        head += [b"content-length: ", str(len(body)).encode(), b"\r\n\r\n", body]
        self.writer.write(b"".join(head))
        self.active_at = time.monotonic()

    async def read_head(self) -> tuple[int, list[tuple[bytes, bytes]]]:
        """The status and the end-to-end headers of the response."""
        try:
            raw = await self.reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError) as exc:
            raise UpstreamError(f"no response from the replica: {type(exc).__name__}") from None
        lines = raw[:-4].split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise UpstreamError("the replica sent no HTTP/1.1 status line")
        headers, keep_alive, self._chunked, self._remaining = [], True, False, 0
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name, value = name.strip().lower(), value.strip()
            if name == b"transfer-encoding":
                self._chunked = b"chunked" in value.lower()
            elif name == b"content-length":
                self._remaining = int(value)
            elif name == b"connection":
                keep_alive = b"close" not in value.lower()
            if name not in HOP_HEADERS:
                headers.append((name, value))
        self.reusable = keep_alive
        return int(parts[1]), headers

    async def body_chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives (see `body_parts`), without the empty parts."""
        async for part, _ in self.body_parts():
            if part:
                yield part

    async def body_parts(self) -> AsyncIterator[tuple[bytes, bool]]:
        """The body as it arrives, one part per read from the socket: every chunk whole by then,
        joined, so that what the replica wrote at once is passed on in one write; True with the
        last part. A chunk is never held back for the next: a part is yielded as soon as it holds
        one whole chunk."""
        reader = self.reader
        try:
            if not self._chunked:
                while self._remaining > 0:
                    data = await reader.read(min(self._remaining, 65536))
                    if not data:
                        raise asyncio.IncompleteReadError(b"", self._remaining)
                    self._remaining -= len(data)
                    self.active_at = time.monotonic()
                    yield data, self._remaining == 0
                return
            buf = b""
            while True:
                data = await reader.read(65536)
                if not data:
                    raise asyncio.IncompleteReadError(b"", None)
                self.active_at = time.monotonic()
                buf += data
                parts, buf, done = _whole_chunks(buf)
                if done:
                    if buf:  # bytes past the end: not a response a replica sends; never reuse this
                        self.reusable = False
                    yield b"".join(parts), True
                    return
                if parts:
                    yield b"".join(parts), False
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError, ValueError) as exc:
            self.reusable = False
            raise UpstreamError(f"the replica's response ended early: {type(exc).__name__}") from None


def _whole_chunks(buf: bytes) -> tuple[list[bytes], bytes, bool]:
    """The payloads of the whole chunks at the start of `buf`, what is left, and whether the last
    chunk (size 0, no trailers from a ttft replica) was among them. ValueError for a size that is
    not hex."""
    parts, pos = [], 0
    while True:
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return parts, buf[pos:], False
        size = int(buf[pos:eol].split(b";", 1)[0], 16)
        if size == 0:
            if len(buf) < eol + 4:  # the empty line after the last chunk is still to come
                return parts, buf[pos:], False
            if buf[eol + 2:eol + 4] != b"\r\n":
                raise ValueError("trailers after the last chunk")
            return parts, buf[eol + 4:], True
        end = eol + 2 + size
        if len(buf) < end + 2:
            return parts, buf[pos:], False
        parts.append(buf[eol + 2:end])
        pos = end + 2
