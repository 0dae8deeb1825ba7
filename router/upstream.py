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
        """The body as it arrives: each chunk of a chunked body the moment it is whole."""
        try:
            if not self._chunked:
                while self._remaining > 0:
                    data = await self.reader.read(min(self._remaining, 65536))
                    if not data:
                        raise asyncio.IncompleteReadError(b"", self._remaining)
                    self._remaining -= len(data)
                    yield data
                return
            while True:
                size_line = await self.reader.readuntil(b"\r\n")
                size = int(size_line.split(b";", 1)[0], 16)
                if size == 0:
                    await self.reader.readuntil(b"\r\n")  # no trailers from a ttft replica
                    return
                data = await self.reader.readexactly(size + 2)
                self.active_at = time.monotonic()
                yield data[:-2]
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError, ValueError) as exc:
            self.reusable = False
            raise UpstreamError(f"the replica's response ended early: {type(exc).__name__}") from None
