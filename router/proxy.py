"""RouterApp: the ASGI app of `ttft route`: the OpenAI API in front, a replica's answer behind.

A request's body is read whole (it decides the replica), then sent to the replica the policy picks.
A streamed answer is passed on chunk by chunk as each arrives, never gathered; a whole answer is
gathered, so that a replica lost half-way gives a clean 502 rather than a truncated JSON body.
Before any byte has reached the client a failed replica costs nothing but a retry elsewhere (a
refused connection, a replica lost or draining); after, a lost replica ends the stream with an
SSE error event and `[DONE]`. A client that goes away has its replica connection closed at once,
which the replica takes as the abort it is.

It runs under the router's own front server (router/front_server.py), whose `ttft.channel` scope
extension it relies on: a stream is written to the client from the replica connection's callback
(router/stream_relay.py) and a disconnect is a callback, not a task per request awaiting `receive`.
"""
from __future__ import annotations

import orjson

from protocol.errors import ApiError
from router.client_channel import ClientChannel
from router.core import Router
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
        if body is not None:
            await self._forward(scope, send, body)

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

    async def _forward(self, scope, send, body: bytes) -> None:
        request = routed_request(body) if scope["method"] == "POST" else RoutedRequest((), 0)
        headers = scope["headers"]  # lower-case already (ASGI)
        target = scope["raw_path"] + (b"?" + scope["query_string"] if scope["query_string"] else b"")
        channel: ClientChannel = scope["extensions"]["ttft.channel"]
        client = ClientGone(channel)
        tried: set[int] = set()
        last: ApiError | None = None
        while not client.gone:
            d = self.router.dispatch(request, tried)
            if d is None:
                break
            tried.add(d.replica_index)
            try:
                outcome = await self._try(d, scope["method"].encode(), target, headers, body, client, channel, send)
            finally:
                self.router.finish(d)
            if outcome is None:
                return
            last = outcome
        if not client.gone:
            await _send_error(send, last or ApiError(503, f"no replica is ready: {self.router.why_none_ready()}",
                                                     type="server_error", headers={"retry-after": "1"}))

    async def _try(self, d, method: bytes, target: bytes, headers, body: bytes, client: ClientGone,
                   channel: ClientChannel, send) -> ApiError | None:
        """Send to one replica and answer the client; an ApiError when another replica may be tried."""
        replica: Replica = d.replica
        try:
            conn = await replica.connection(self.connect_timeout_s)
        except UpstreamError as exc:
            replica.set_state(DOWN, str(exc))
            return ApiError(502, f"replica {replica.url} unreachable", type="server_error")
        if client.gone:  # went away while the connection was being made: no request for nobody
            replica.release(conn)
            return None
        client.conn = conn
        relay = StreamRelay(channel, self.router, d, conn)
        try:
            conn.send(method, target, replica.host_header, headers, body, relay)
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
                await self._stream_end(d, relay, client, channel)
            else:
                await self._whole(d, conn, status, resp_headers, client, send)
        finally:
            client.conn = None
            replica.release(conn)
        return None

    async def _stream_end(self, d, relay: StreamRelay, client: ClientGone, channel: ClientChannel) -> None:
        """The relay writes the stream as it comes; here only its end is awaited, and a stream lost
        part-way is ended with an error event."""
        why = await relay.finished
        if why is None or client.gone:
            return
        self._lost(d.replica, client, UpstreamError(why))
        err = ApiError(502, f"replica {d.replica.url} was lost mid-stream", type="server_error", code="replica_lost")
        channel.body(b"data: " + err.to_body() + b"\n\n" + SSE_DONE, True)
        channel.body(b"", False)

    async def _whole(self, d, conn: UpstreamConnection, status: int, headers, client: ClientGone, send) -> None:
        """An answer that is not a stream, read whole: a replica lost half-way gives a clean 502."""
        try:
            data = b"".join([c async for c in conn.body_chunks()])
        except UpstreamError as exc:
            self._lost(d.replica, client, exc)
            return await _send_error(send, ApiError(502, f"replica {d.replica.url} failed mid-answer",
                                                    type="server_error"))
        self.router.first_token(d)
        headers.append((b"content-length", str(len(data)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})

    @staticmethod
    def _lost(replica: Replica, client: ClientGone, exc: Exception) -> None:
        """A replica that failed mid-answer is down (unless the failure was our own close, for a client gone)."""
        if not client.gone and replica.state != DOWN:
            replica.set_state(DOWN, str(exc))


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
