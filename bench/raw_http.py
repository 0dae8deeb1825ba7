"""A minimal HTTP/1.1 keep-alive client on asyncio streams (TCP or Unix socket).

Why not httpx: its pure-Python framing costs tens of microseconds per streamed chunk, and at 64 streams
of 4 ms tokens the client would spend most of a core on parsing and skew the very latencies it measures.
Here each socket read is timestamped at once and parsed by `http_parse` (a few microseconds per chunk).
Only what a benchmark needs: POST/GET with a body, chunked or sized responses, no redirects, no TLS.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Callable
from urllib.parse import urlsplit

from bench.http_parse import BodyDecoder, ResponseHead, parse_head

READ_SIZE = 1 << 16
MAX_HEAD_BYTES = 1 << 16


@dataclass(frozen=True, slots=True)
class Target:
    host: str
    port: int
    path_prefix: str  # e.g. "" or "/proxy"; endpoint paths are appended to it
    uds: str | None = None

    @classmethod
    def from_url(cls, base_url: str, uds: str | None = None) -> "Target":
        parts = urlsplit(base_url)
        if parts.scheme != "http":
            raise ValueError(f"only http:// base URLs are supported, got {base_url!r}")
        return cls(parts.hostname or "127.0.0.1", parts.port or 80, parts.path.rstrip("/"), uds)


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.num_requests = 0

    def close(self) -> None:
        self.writer.close()


class ConnectionPool:
    """Idle keep-alive connections, reused last-in first-out; new ones opened on demand."""

    def __init__(self, target: Target, max_idle: int) -> None:
        self.target = target
        self.max_idle = max_idle
        self._idle: list[Connection] = []

    async def open(self) -> Connection:
        t = self.target
        if t.uds:
            reader, writer = await asyncio.open_unix_connection(t.uds, limit=READ_SIZE)
        else:
            reader, writer = await asyncio.open_connection(t.host, t.port, limit=READ_SIZE)
        return Connection(reader, writer)

    async def acquire(self) -> Connection:
        while self._idle:
            conn = self._idle.pop()
            if not conn.reader.at_eof() and not conn.writer.is_closing():
                return conn
            conn.close()  # the server closed it while idle (keep-alive timeout)
        return await self.open()

    def release(self, conn: Connection, reusable: bool) -> None:
        if reusable and len(self._idle) < self.max_idle:
            self._idle.append(conn)
        else:
            conn.close()

    async def prewarm(self, num_connections: int) -> None:
        """Open connections ahead of the measured run so no request pays a TCP connect."""
        need = max(0, min(num_connections, self.max_idle) - len(self._idle))
        for conn in await asyncio.gather(*(self.open() for _ in range(need))):
            self.release(conn, True)

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def build_request(target: Target, method: str, path: str, body: bytes, headers: dict[str, str]) -> bytes:
    lines = [f"{method} {target.path_prefix}{path} HTTP/1.1", f"Host: {target.host}:{target.port}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class StaleConnection(Exception):
    """A reused connection was closed by the server before any byte of the response came back."""


async def exchange(
    conn: Connection, request: bytes, on_body: Callable[[ResponseHead, bytes, float], None]
) -> tuple[ResponseHead, bool]:
    """Send one request; feed each piece of decoded body to `on_body(head, bytes, arrival_perf_counter)`.

    Returns the head and whether the connection may be reused.
    """
    conn.writer.write(request)
    reader = conn.reader
    buf = b""
    head: ResponseHead | None = None
    decoder: BodyDecoder | None = None
    while True:
        data = await reader.read(READ_SIZE)
        t = time.perf_counter()
        if not data:
            if head is None and not buf and conn.num_requests > 0:
                raise StaleConnection()
            if decoder is None:
                raise ConnectionError("connection closed before the response head")
            decoder.feed_eof()
            return head, False  # type: ignore[return-value]
        if head is None:
            buf += data
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEAD_BYTES:
                    raise ConnectionError("response head too large")
                continue
            head = parse_head(buf[:end])
            decoder = BodyDecoder(head)
            data = buf[end + 4 :]
        assert decoder is not None
        body = decoder.feed(data)
        if body:
            on_body(head, body, t)
        if decoder.done:
            conn.num_requests += 1
            return head, head.keep_alive and not decoder.until_close
