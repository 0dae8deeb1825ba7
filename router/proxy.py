"""RouterApp: the ASGI app of `ttft route`: the OpenAI API in front, a replica's answer behind.

A request's body is read whole (it decides the replica), then sent to the replica the policy picks.
A streamed answer is passed on chunk by chunk as each arrives, never gathered; a whole answer is
gathered, so that a replica lost half-way gives a clean 502 rather than a truncated JSON body.
Before any byte has reached the client a failed replica costs nothing but a retry elsewhere (a
refused connection, a replica lost or draining); after, a lost replica ends the stream with an
SSE error event and `[DONE]`. A client that goes away has its replica connection closed at once,
which the replica takes as the abort it is.

It runs under the router's own front server (router/front_server.py), which hands it the POSTs to
the completion routes straight from its parser (`forward`: no ASGI scope, no task unless the answer
is not a stream) and everything else through ASGI, with the request's ClientChannel in the scope's
`ttft.channel` extension. Either way a stream is written to the client from the replica
connection's callback (router/stream_relay.py), the answer is written through the channel, and a
disconnect is a callback, not a task per request awaiting `receive`.
"""
from __future__ import annotations

import orjson

from protocol.errors import ApiError
from router.client_channel import ClientChannel
from router.core import Dispatch, Router
from router.front_server import FrontRequest
from router.replica import DOWN, DRAINING, Replica
from router.request_key import RoutedRequest, routed_request
from router.stream_relay import StreamRelay
from router.upstream import UpstreamConnection, UpstreamError

JSON = [(b"content-type", b"application/json")]
SSE_DONE = b"data: [DONE]\n\n"


class ClientGone:
    """Set when the client disconnects; closes the replica connection in use at that moment."""

    __slots__ = ("gone", "conn")

    def __init__(self, channel: ClientChannel) -> None:
        self.gone = False
        self.conn: UpstreamConnection | None = None
        channel.on_gone(self._disconnected)

    def _disconnected(self) -> None:
        self.gone = True
        if self.conn is not None:
            self.conn.close()


class RouterApp:
    # POSTs the front server hands to `forward` with no ASGI scope, receive nor send: the routes
    # whose latency is the router's whole cost. Anything else (any other path, a query string, a
    # HEAD) goes through the ASGI app and the same forwarding, run as a task.
    paths = frozenset({b"/v1/chat/completions", b"/v1/completions"})

    def __init__(self, router: Router, max_body_bytes: int = 16 * 1024 * 1024, connect_timeout_s: float = 1.0) -> None:
        self.router = router
        self.max_body_bytes = max_body_bytes
        self.connect_timeout_s = connect_timeout_s

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            return await self._lifespan(receive, send)
        if scope["type"] != "http":
            return
        path = scope["path"]
        if path == "/health":
            info = self.router.describe()
            return await _send_json(send, 200 if info["num_ready"] else 503, orjson.dumps(info))
        if path == "/live":
            return await _send_json(send, 200, b'{"status":"live"}')
        body = await self._read_body(receive, send)
        if body is None:
            return
        method = scope["method"]
        request = routed_request(body) if method == "POST" else RoutedRequest((), 0)
        target = scope["raw_path"] + (b"?" + scope["query_string"] if scope["query_string"] else b"")
        channel: ClientChannel = scope["extensions"]["ttft.channel"]
        await self._forward(Forwarded(method.encode(), target, scope["headers"], body, request, channel))

    def forward(self, req: FrontRequest) -> None:
        """A POST to one of `paths`, sent from the front connection's own callback: the body parsed
        once, a replica picked and the request written to an idle connection to it before the
        callback returns. A stream then goes to the client from the replica connection's callbacks
        and ends in one (`ended`): no task. Anything else (no idle
        connection, no replica, an answer that is not a stream, a failure before the head) goes on in
        the task path from where it stands."""
        f = Forwarded(b"POST", req.target, req.headers, req.body, routed_request(req.body), req.channel)
        d = self.router.dispatch(f.request)
        conn = d.replica.idle_connection() if d is not None else None
        if conn is None:
            return req.spawn(self._forward(f, d))
        f.client.conn = conn

        def ended(why: str | None) -> None:
            try:  # in the replica connection's callback: whatever fails here, the front moves on
                f.client.conn = None
                if why is not None:
                    self._stream_lost(d, f, why)
                self.router.finish(d)
                d.replica.release(conn)
            finally:
                req.done()

        relay = StreamRelay(f.channel, self.router, d, conn, ended,
                            lambda: req.spawn(self._forward(f, d, conn, relay)))
        conn.send(b"POST", f.target, d.replica.host_header, f.headers, f.body, relay)

    async def _lifespan(self, receive, send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await self.router.health.check_all()  # route from the first request on
                self.router.health.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.router.health.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _read_body(self, receive, send) -> bytes | None:
        parts, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                await _send_error(send, ApiError(413, f"request body over {self.max_body_bytes} bytes"))
                return None
            parts.append(chunk)
            if not message.get("more_body", False):
                return b"".join(parts)

    async def _forward(self, f: Forwarded, d: Dispatch | None = None, conn: UpstreamConnection | None = None,
                       relay: StreamRelay | None = None) -> None:
        """Send to replicas in turn until one answers (or none is left); `d`, `conn` and `relay`: a
        first try the callback path already dispatched (and sent, with `conn`)."""
        tried: set[int] = set()
        last: ApiError | None = None
        while not f.client.gone:
            if d is None:
                d = self.router.dispatch(f.request, tried)
                if d is None:
                    break
            tried.add(d.replica_index)
            try:
                outcome = await self._try(d, f, conn, relay)
            finally:
                self.router.finish(d)
            if outcome is None:
                return
            last, d, conn, relay = outcome, None, None, None
        if not f.client.gone:
            _write_error(f.channel, last or ApiError(503, f"no replica is ready: {self.router.why_none_ready()}",
                                                     type="server_error", headers={"retry-after": "1"}))

    async def _try(self, d: Dispatch, f: Forwarded, conn: UpstreamConnection | None,
                   relay: StreamRelay | None) -> ApiError | None:
        """Send to one replica (unless `conn` was sent the request already) and answer the client; an
        ApiError when another replica may be tried."""
        replica: Replica = d.replica
        client = f.client
        if conn is None:
            try:
                conn = await replica.connection(self.connect_timeout_s)
            except UpstreamError as exc:
                replica.set_state(DOWN, str(exc))
                return ApiError(502, f"replica {replica.url} unreachable", type="server_error")
            if client.gone:  # went away while the connection was being made: no request for nobody
                replica.release(conn)
                return None
            client.conn = conn
            ends = conn.loop.create_future()
            relay = StreamRelay(f.channel, self.router, d, conn, lambda why: ends.done() or ends.set_result(why))
            conn.send(f.method, f.target, replica.host_header, f.headers, f.body, relay)
        else:
            ends = None  # the callback path's relay declined the answer: it is read here
        try:
            status, resp_headers = await conn.read_head()
        except UpstreamError as exc:
            replica.release(conn)
            if not client.gone and replica.state != DRAINING:
                replica.set_state(DOWN, str(exc))
            return ApiError(502, f"replica {replica.url} failed before answering", type="server_error")
        if status == 503:  # draining, or full: another replica may have room
            raw = b"".join([c async for c in _safe_chunks(conn)])
            replica.release(conn)
            if b"draining" in raw or b"stopped" in raw:
                replica.set_state(DRAINING, "replica answered 503 draining")
            return ApiError(503, _message(raw) or "replica overloaded", type="server_error",
                            headers={"retry-after": "1"})
        try:
            if relay.taken:
                why = await ends
                if why is not None:
                    self._stream_lost(d, f, why)
            else:
                await self._whole(d, conn, status, resp_headers, f)
        finally:
            client.conn = None
            replica.release(conn)
        return None

    def _stream_lost(self, d: Dispatch, f: Forwarded, why: str) -> None:
        """A stream lost part-way is ended with an error event (unless the client is gone)."""
        if f.client.gone:
            return
        self._lost(d.replica, f.client, UpstreamError(why))
        err = ApiError(502, f"replica {d.replica.url} was lost mid-stream", type="server_error", code="replica_lost")
        f.channel.body(b"data: " + err.to_body() + b"\n\n" + SSE_DONE, True)
        f.channel.body(b"", False)

    async def _whole(self, d: Dispatch, conn: UpstreamConnection, status: int, headers, f: Forwarded) -> None:
        """An answer that is not a stream, read whole: a replica lost half-way gives a clean 502."""
        try:
            data = b"".join([c async for c in conn.body_chunks()])
        except UpstreamError as exc:
            self._lost(d.replica, f.client, exc)
            return _write_error(f.channel, ApiError(502, f"replica {d.replica.url} failed mid-answer",
                                                    type="server_error"))
        self.router.first_token(d)
        if f.method != b"HEAD":  # (a HEAD's head keeps the replica's length, of a body not sent)
            headers.append((b"content-length", b"%d" % len(data)))
        f.channel.start(status, headers)
        f.channel.body(data, False)

    @staticmethod
    def _lost(replica: Replica, client: ClientGone, exc: Exception) -> None:
        """A replica that failed mid-answer is down (unless the failure was our own close, for a client gone)."""
        if not client.gone and replica.state != DOWN:
            replica.set_state(DOWN, str(exc))


class Forwarded:
    """One request on its way to a replica: what is sent, what routes it, where the answer goes."""

    __slots__ = ("method", "target", "headers", "body", "request", "channel", "client")

    def __init__(self, method: bytes, target: bytes, headers: list[tuple[bytes, bytes]], body: bytes,
                 request: RoutedRequest, channel: ClientChannel) -> None:
        self.method, self.target, self.headers, self.body = method, target, headers, body
        self.request, self.channel = request, channel
        self.client = ClientGone(channel)


async def _safe_chunks(conn: UpstreamConnection):
    try:
        async for chunk in conn.body_chunks():
            yield chunk
    except UpstreamError:
        return


def _message(raw: bytes) -> str | None:
    try:
        return orjson.loads(raw)["error"]["message"]
    except Exception:  # not ttft's error shape: the router's own message stands
        return None


async def _send_json(send, status: int, body: bytes, extra: list | None = None) -> None:
    headers = JSON + [(b"content-length", str(len(body)).encode())] + (extra or [])
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _send_error(send, err: ApiError) -> None:
    extra = [(k.encode(), v.encode()) for k, v in err.headers.items()]
    await _send_json(send, err.status, err.to_body(), extra)


def _write_error(channel: ClientChannel, err: ApiError) -> None:
    body = err.to_body()
    extra = [(k.encode(), v.encode()) for k, v in err.headers.items()]
    channel.start(err.status, JSON + [(b"content-length", b"%d" % len(body))] + extra)
    channel.body(body, False)
