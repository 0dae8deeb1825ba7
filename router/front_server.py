"""FrontServer: the router's own HTTP/1.1 server, an asyncio Protocol that drives RouterApp's ASGI
interface with nothing between a client's bytes and the app but httptools.

Why not uvicorn: its per-request machinery (a cycle object, header validation, flow-control
events, default headers, a message queue for the body, three `send`s each framed and written on
their own) is general-purpose work on the router's only path, the one whose cost is added to every
first token. This server parses with the same C parser, hands the app the whole body at once (the
router reads it whole anyway, bounded by `max_body_bytes`: past it the answer is a 413 before the
rest is read), and writes a response's head with its first body part, so a one-token stream leaves
in one send. The ASGI subset is what RouterApp uses: `http` and `lifespan` scopes, a receive that
gives the body then waits for the disconnect, a send of `http.response.start` and `.body`, and the
scope's `extensions["ttft.channel"]`: the request's ClientChannel (router/client_channel.py), which
that send wraps, for an app that writes from callbacks and wants a disconnect as a callback.
A `Forwarder` given beside the app takes the POSTs to its paths with none of that: the parsed
request (method, target, header list and body as bytes) is handed to it from the parser's
callback, and no task is made unless it asks for one. Per request the ASGI layer costs a scope
dict, two closures, a task and its coroutine frames, all before the replica's write.
Keep-alive per HTTP/1.1 (idle connections closed after `keep_alive_s`), pipelined requests answered
in order, `Expect: 100-continue` answered. SIGINT/SIGTERM stop it: no new connections, requests in
flight get `shutdown_s` to finish, then the app's lifespan shutdown.
"""
from __future__ import annotations

import asyncio
import logging
import socket
from collections import deque
from typing import Any, Callable, Coroutine, Protocol
from urllib.parse import unquote

import httptools

from pipeline.loop_signals import signals_on_loop
from protocol.errors import ApiError
from router.client_channel import ClientChannel, reason

log = logging.getLogger("ttft.router")
MAX_HEADERS, MAX_HEAD_BYTES = 100, 64 * 1024


def _error_response(err: ApiError, keep_alive: bool) -> bytes:
    body = err.to_body()
    head = b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n" % (
        err.status, reason(err.status), len(body))
    head += b"".join(b"%s: %s\r\n" % (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in err.headers.items())
    return head + (b"" if keep_alive else b"connection: close\r\n") + b"\r\n" + body


class FrontRequest:
    """One parsed request and its response's channel; `done` or `spawn` says how its answer ends."""

    __slots__ = ("protocol", "method", "target", "http_version", "headers", "body", "channel", "refusal",
                 "disconnect")

    def __init__(self, protocol: "FrontProtocol", method: bytes, target: bytes, http_version: str,
                 headers: list[tuple[bytes, bytes]], body: bytes, channel: ClientChannel,
                 refusal: ApiError | None) -> None:
        self.protocol, self.method, self.target, self.http_version = protocol, method, target, http_version
        self.headers, self.body, self.channel = headers, body, channel  # header names lower-case
        self.refusal = refusal  # answered by the server, not the app (a body over the limit)
        self.disconnect: asyncio.Future | None = None

    def done(self) -> None:
        """The answer is over (written whole, or given up on): the connection goes on to the next."""
        self.protocol.ended(self)

    def spawn(self, coro: Coroutine) -> None:
        """Go on in a task: the answer is over when `coro` returns (a failure is a 500 or a close)."""
        self.protocol.run_task(self, coro)

    def scope(self) -> dict:
        """The ASGI `http` scope, built only for a request the app answers."""
        parsed = httptools.parse_url(self.target)
        raw_path = parsed.path
        return {"type": "http", "asgi": {"version": "3.0"}, "http_version": self.http_version,
                "method": self.method.decode("ascii"), "scheme": "http",
                "path": unquote(raw_path.decode("ascii", "replace")), "raw_path": raw_path,
                "query_string": parsed.query or b"", "root_path": "", "headers": self.headers,
                "server": None, "client": None, "extensions": {"ttft.channel": self.channel}}


class FrontProtocol(asyncio.Protocol):
    def __init__(self, server: "FrontServer") -> None:
        self.server = server
        self.loop = asyncio.get_running_loop()
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.queue: deque[FrontRequest] = deque()  # parsed, not yet answered (pipelining)
        self.current: FrontRequest | None = None
        self.closed = False
        self._can_write: asyncio.Future | None = None
        self._idle: asyncio.TimerHandle | None = None
        self.last_active = self.loop.time()
        self._reset_message()

    # -- connection ---------------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.connections.add(self)
        self._arm_idle()

    def connection_lost(self, exc) -> None:
        self.closed = True
        self.server.connections.discard(self)
        if self._idle is not None:
            self._idle.cancel()
        req = self.current
        if req is not None:
            req.channel.lost()
            if req.disconnect is not None and not req.disconnect.done():
                req.disconnect.set_result(None)
        if self._can_write is not None and not self._can_write.done():
            self._can_write.set_result(None)

    def pause_writing(self) -> None:
        self._can_write = self.loop.create_future()
        if self.current is not None:
            self.current.channel.pause()

    def resume_writing(self) -> None:
        if self._can_write is not None and not self._can_write.done():
            self._can_write.set_result(None)
        self._can_write = None
        if self.current is not None:
            self.current.channel.resume()
        elif self.queue:  # a pipelined request waited for the last answer to drain
            self._next()

    def data_received(self, data: bytes) -> None:
        self.last_active = self.loop.time()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._refuse(ApiError(400, "protocol upgrades are not supported"))
        except httptools.HttpParserError as exc:  # a callback's own error comes wrapped in one
            cause = exc.__cause__ or exc.__context__
            self._refuse(cause.error if isinstance(cause, _TooLarge) else ApiError(400, "malformed HTTP request"))
        except _TooLarge as exc:  # a head too large (its end may never come), a body nobody will send
            self._refuse(exc.error)

    def _refuse(self, err: ApiError) -> None:
        """Answer what cannot be parsed or is too large, then close: the rest of its bytes are unread."""
        if not self.closed and self.current is None:
            self.transport.write(_error_response(err, keep_alive=False))
        self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.current is not None:  # nothing more will be written: whatever feeds it may stop
                self.current.channel.lost()
            self.transport.close()

    def _arm_idle(self) -> None:
        """One timer per connection, moved on only when it fires, rather than a timer per request:
        idle means no bytes from the client and no request in hand for `keep_alive_s`."""
        self._idle = self.loop.call_later(self.server.keep_alive_s, self._close_if_idle)

    def _close_if_idle(self) -> None:
        if self.closed:
            return
        if self.current is not None or self.queue:  # busy: the idle clock starts when the answer ends
            left = self.server.keep_alive_s
        else:
            left = self.last_active + self.server.keep_alive_s - self.loop.time()
            if left <= 0:
                self.close()
                return
        self._idle = self.loop.call_later(left, self._close_if_idle)

    # -- httptools callbacks ------------------------------------------------------------------
    def _reset_message(self) -> None:
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.head_bytes = 0
        self.body_parts: list[bytes] = []
        self.body_size = 0
        self.refusal: ApiError | None = None

    def on_message_begin(self) -> None:
        self._reset_message()

    def on_url(self, url: bytes) -> None:
        self.url += url
        self.head_bytes += len(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.head_bytes += len(name) + len(value)
        if len(self.headers) >= MAX_HEADERS or self.head_bytes > MAX_HEAD_BYTES:
            raise _TooLarge(ApiError(431, "request header fields too large"))
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        limit = self.server.max_body_bytes
        expect = False
        for name, value in self.headers:
            if name == b"content-length" and value.isdigit() and int(value) > limit:
                self.refusal = ApiError(413, f"request body over {limit} bytes")
            elif name == b"expect" and value.lower() == b"100-continue":
                expect = True
        if expect:
            if self.refusal is not None:  # the client waits for a word before its body: this one
                raise _TooLarge(self.refusal)
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        """Bodies over the limit are read and dropped, not cut off: closing on unread bytes would reset
        the connection, and the client could lose the 413 that explains it."""
        if self.refusal is not None:
            return
        self.body_size += len(body)
        if self.body_size > self.server.max_body_bytes:
            self.refusal = ApiError(413, f"request body over {self.server.max_body_bytes} bytes")
            self.body_parts = []
            return
        self.body_parts.append(body)

    def on_message_complete(self) -> None:
        method = self.parser.get_method()
        version = self.parser.get_http_version()
        channel = ClientChannel(self.transport, version, method == b"HEAD", self.parser.should_keep_alive())
        body = b"".join(self.body_parts) if len(self.body_parts) != 1 else self.body_parts[0]
        self.queue.append(FrontRequest(self, method, self.url, version, self.headers, body, channel, self.refusal))
        if self.current is None:
            self._next()
        if self.queue:
            self.transport.pause_reading()  # one answered at a time: no more parsed meanwhile

    # -- answering ----------------------------------------------------------------------------
    def _next(self) -> None:
        if not self.queue or self.closed or self._can_write is not None:  # (a full buffer: on resume)
            return
        self.current = req = self.queue.popleft()
        if req.refusal is not None:
            self.transport.write(_error_response(req.refusal, req.channel.keep_alive))
            req.channel.done = True
            return self.ended(req)
        forward = self.server.forward
        if forward is not None and req.method == b"POST" and req.target in forward.paths:
            try:
                forward.forward(req)
            except Exception:
                self._failed(req)
            return
        self.run_task(req, self.server.app(req.scope(), self._receiver(req), self._sender(req.channel)))

    def run_task(self, req: FrontRequest, coro: Coroutine) -> None:
        task = self.loop.create_task(self._run(req, coro))
        self.server.tasks.add(task)
        task.add_done_callback(self.server.tasks.discard)

    async def _run(self, req: FrontRequest, coro: Coroutine) -> None:
        try:
            await coro
        except Exception:
            return self._failed(req)
        self.ended(req)

    def _failed(self, req: FrontRequest) -> None:
        log.exception("the router failed on %s %s", req.method.decode("ascii", "replace"),
                      req.target.decode("ascii", "replace"))
        if not req.channel.started and not self.closed:
            self.transport.write(_error_response(ApiError(500, "internal router error", type="server_error"),
                                                 keep_alive=False))
        self.close()

    def ended(self, req: FrontRequest) -> None:
        if req is not self.current:  # (its connection closed meanwhile, and the answer's end came late)
            return
        if not req.channel.done:  # the app gave up on a response it started (the client went away)
            self.close()
            return
        self.current = None
        self.last_active = self.loop.time()
        if not req.channel.keep_alive or self.server.stopping:
            self.close()
        elif self.queue:
            self.transport.resume_reading()
            self._next()

    def _receiver(self, req: FrontRequest) -> Callable:
        sent = False

        async def receive() -> dict:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": req.body, "more_body": False}
            if self.closed:
                return {"type": "http.disconnect"}
            req.disconnect = self.loop.create_future()
            await req.disconnect
            return {"type": "http.disconnect"}

        return receive

    def _sender(self, channel: ClientChannel) -> Callable:
        async def send(message: dict) -> None:
            if message["type"] == "http.response.start":
                channel.start(message["status"], message.get("headers", []))
                return
            channel.body(message.get("body", b""), message.get("more_body", False))
            if self._can_write is not None:
                await self._can_write

        return send


class _TooLarge(Exception):
    def __init__(self, error: ApiError) -> None:
        self.error = error


class Forwarder(Protocol):
    """What answers the POSTs to some paths without ASGI (router/proxy.py's RouterApp)."""

    paths: frozenset[bytes]  # request targets, exactly as sent (a query string goes the ASGI way)

    def forward(self, req: FrontRequest) -> None:
        """Start answering `req`; it ends with `req.done()` or with the task given `req.spawn`."""


class FrontServer:
    def __init__(self, app: Any, max_body_bytes: int, keep_alive_s: float = 5.0, shutdown_s: float = 5.0,
                 forward: Forwarder | None = None) -> None:
        self.app = app
        self.forward = forward
        self.max_body_bytes = max_body_bytes
        self.keep_alive_s = keep_alive_s
        self.shutdown_s = shutdown_s
        self.connections: set[FrontProtocol] = set()
        self.tasks: set[asyncio.Task] = set()
        self.stopping = False
        self._stop = asyncio.Event()

    def stop(self, *_: object) -> None:
        self._stop.set()

    async def serve(self, sockets: list[socket.socket], on_started: Callable[[], None] | None = None) -> None:
        """Lifespan startup, serve until stopped (SIGINT, SIGTERM or `stop`), then shut down."""
        lifespan = _Lifespan(self.app)
        await lifespan.startup()
        loop = asyncio.get_running_loop()
        servers = [await loop.create_server(lambda: FrontProtocol(self), sock=sock) for sock in sockets]
        if on_started is not None:
            on_started()
        with signals_on_loop(self.stop):
            await self._stop.wait()
        self.stopping = True
        for server in servers:
            server.close()
        for conn in list(self.connections):
            if conn.current is None:
                conn.close()
        # Requests in flight end in a task or in a callback: polled, since a forwarded stream has no task.
        deadline = loop.time() + self.shutdown_s
        while any(conn.current is not None for conn in self.connections) and loop.time() < deadline:
            await asyncio.sleep(0.02)
        for conn in list(self.connections):
            conn.close()
        for task in list(self.tasks):
            task.cancel()
        await lifespan.shutdown()


class _Lifespan:
    """Runs the app's lifespan scope: startup before serving, shutdown after."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.inbox: asyncio.Queue = asyncio.Queue()
        self.events: asyncio.Queue = asyncio.Queue()

    async def startup(self) -> None:
        self.task = asyncio.create_task(self.app({"type": "lifespan"}, self.inbox.get, self.events.put))
        await self.inbox.put({"type": "lifespan.startup"})
        await self._wait("lifespan.startup.complete")

    async def shutdown(self) -> None:
        await self.inbox.put({"type": "lifespan.shutdown"})
        await self._wait("lifespan.shutdown.complete")
        await self.task

    async def _wait(self, kind: str) -> None:
        get = asyncio.ensure_future(self.events.get())
        await asyncio.wait([get, self.task], return_when=asyncio.FIRST_COMPLETED)
        if not get.done():
            get.cancel()
            self.task.result()  # the app's own error, if it failed
            raise RuntimeError(f"the app's lifespan ended before {kind}")
        message = get.result()
        if message["type"] != kind:
            raise RuntimeError(f"the app's lifespan answered {message['type']}, not {kind}")
