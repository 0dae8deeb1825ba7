"""One HTTP request over a raw asyncio socket, with the misbehaviours a soak needs.

`request()` sends one POST (or GET) on a fresh connection and can leave at a chosen moment: after a
delay whatever the server has sent (`cut_after_s`: queued, prefilling or mid-stream), after a number
of SSE events (`cut_after_events`), or never read at all (`read=False`: a client that stopped reading
but keeps its socket open, until `hold_s` is over). Closing the socket is exactly what a browser tab
or a killed client does, so the server sees a real disconnect, not a polite cancellation.

Used by `bench.soak` and by the reliability tests in tests/pipeline/.
"""
from __future__ import annotations

import asyncio
import socket
import time
from dataclasses import dataclass, field

import orjson

from bench.http_parse import BodyDecoder, ProtocolError, ResponseHead, SseSplitter, parse_head

READ_SIZE = 1 << 16


@dataclass
class Reply:
    status: int | None = None  # None: no response head arrived (cut early, refused, timed out)
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""  # decoded body (for a stream: every byte of it)
    events: list[bytes] = field(default_factory=list)  # SSE data payloads, in order
    cut: bool = False  # the client left on purpose before the end
    timed_out: bool = False  # the client's own deadline passed (a hang, unless the test wanted it)
    error: str | None = None  # connection-level failure
    elapsed_s: float = 0.0

    @property
    def done(self) -> bool:
        """A stream that ended with `data: [DONE]`."""
        return bool(self.events) and self.events[-1] == b"[DONE]"

    def json_events(self) -> list[dict]:
        return [orjson.loads(e) for e in self.events if e != b"[DONE]"]

    def json(self):
        return orjson.loads(self.body)


def build(method: str, host: str, port: int, path: str, body: bytes, headers: dict[str, str]) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}", "Connection: close"]
    if not any(k.lower() == "content-type" for k in headers):
        lines.append("Content-Type: application/json")
    lines += [f"{k}: {v}" for k, v in headers.items()]
    lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


async def request(
    host: str,
    port: int,
    path: str,
    body: bytes | dict = b"",
    *,
    method: str = "POST",
    headers: dict[str, str] | None = None,
    cut_after_s: float | None = None,
    cut_after_events: int | None = None,
    read: bool = True,
    hold_s: float = 0.0,
    recv_buffer_bytes: int | None = None,
    timeout_s: float = 30.0,
    uds: str | None = None,
) -> Reply:
    """`uds`: connect to this Unix socket instead (host and port then only fill the Host header)."""
    raw_body = orjson.dumps(body) if isinstance(body, dict) else body
    reply = Reply()
    t0 = time.monotonic()
    sock = None
    try:
        sock = socket.socket(socket.AF_UNIX if uds else socket.AF_INET, socket.SOCK_STREAM)
        if recv_buffer_bytes is not None:  # before connect, so the window is small from the start
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, recv_buffer_bytes)
        sock.setblocking(False)
        loop = asyncio.get_running_loop()
        await loop.sock_connect(sock, uds or (host, port))
        if not read:  # no StreamReader either: it would keep reading into its own buffer
            try:
                await loop.sock_sendall(sock, build(method, host, port, path, raw_body, headers or {}))
                await asyncio.sleep(hold_s)  # never read, the socket still open
                reply.cut = True
                return reply
            finally:
                sock.close()
                reply.elapsed_s = time.monotonic() - t0
        reader, writer = await asyncio.open_connection(sock=sock, limit=READ_SIZE)
    except OSError as exc:
        if sock is not None:
            sock.close()
        reply.error = f"connect: {exc}"
        reply.elapsed_s = time.monotonic() - t0
        return reply
    try:
        writer.write(build(method, host, port, path, raw_body, headers or {}))
        deadline = t0 + timeout_s
        cut_at = None if cut_after_s is None else t0 + cut_after_s
        await _read(reader, reply, deadline, cut_at, cut_after_events)
    except (OSError, ProtocolError) as exc:
        reply.error = f"{type(exc).__name__}: {exc}"
    finally:
        writer.close()  # a cut: the server sees the connection go away
        reply.elapsed_s = time.monotonic() - t0
    return reply


async def _read(reader: asyncio.StreamReader, reply: Reply, deadline: float, cut_at: float | None,
                cut_after_events: int | None) -> None:
    buf = b""
    head: ResponseHead | None = None
    decoder: BodyDecoder | None = None
    sse = SseSplitter()
    body = bytearray()
    while True:
        now = time.monotonic()
        until = deadline if cut_at is None else min(deadline, cut_at)
        try:
            data = await asyncio.wait_for(reader.read(READ_SIZE), max(0.0, until - now))
        except asyncio.TimeoutError:
            if cut_at is not None and time.monotonic() >= cut_at and cut_at <= deadline:
                reply.cut = True
            else:
                reply.timed_out = True
            break
        if not data:
            if decoder is not None:
                decoder.feed_eof()
            elif head is None:
                reply.error = "connection closed before the response head"
            break
        if head is None:
            buf += data
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                continue
            head = parse_head(buf[:end])
            reply.status, reply.headers = head.status, head.headers
            decoder = BodyDecoder(head)
            data = buf[end + 4:]
        assert decoder is not None
        piece = decoder.feed(data)
        body += piece
        if "text/event-stream" in head.headers.get("content-type", ""):
            reply.events.extend(sse.feed(piece))
            if cut_after_events is not None and len(reply.events) >= cut_after_events:
                reply.cut = not reply.done
                break
        if decoder.done:
            break
    reply.body = bytes(body)
