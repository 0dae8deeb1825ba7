"""RouterApp: the ASGI app of `ttft route`: the OpenAI API in front, a replica's answer behind.

A request's body is read whole (it decides the replica), then sent to the replica the policy picks.
A streamed answer is passed on chunk by chunk as each arrives, never gathered; a whole answer is
gathered, so that a replica lost half-way gives a clean 502 rather than a truncated JSON body.
Before any byte has reached the client a failed replica costs nothing but a retry elsewhere (a
refused connection, a replica lost or draining); after, a lost replica ends the stream with an
SSE error event and `[DONE]`. A client that goes away has its replica connection closed at once,
which the replica takes as the abort it is.
"""
from __future__ import annotations

import asyncio

import orjson

from protocol.errors import ApiError
from router.core import Router
from router.replica import DOWN, DRAINING, Replica
from router.request_key import RoutedRequest, routed_request
from router.upstream import UpstreamConnection, UpstreamError

JSON = [(b"content-type", b"application/json")]
SSE_DONE = b"data: [DONE]\n\n"


class ClientGone:
    """Set when the client disconnects; closes the replica connection in use at that moment."""

    def __init__(self) -> None:
        self.gone = False
        self.conn: UpstreamConnection | None = None

    async def watch(self, receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
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
            await self._forward(scope, receive, send, body)

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

    async def _forward(self, scope, receive, send, body: bytes) -> None:
        request = routed_request(body) if scope["method"] == "POST" else RoutedRequest((), 0)
        headers = scope["headers"]  # lower-case already (ASGI)
        target = scope["raw_path"] + (b"?" + scope["query_string"] if scope["query_string"] else b"")
        client = ClientGone()
        watcher = asyncio.ensure_future(client.watch(receive))
        tried: set[int] = set()
        last: ApiError | None = None
        try:
            while not client.gone:
                d = self.router.dispatch(request, tried)
                if d is None:
                    break
                tried.add(d.replica_index)
                try:
                    outcome = await self._try(d, scope["method"].encode(), target, headers, body, client, send)
                finally:
                    self.router.finish(d)
                if outcome is None:
                    return
                last = outcome
            if not client.gone:
                await _send_error(send, last or ApiError(503, f"no replica is ready: {self.router.why_none_ready()}",
                                                         type="server_error", headers={"retry-after": "1"}))
        finally:
            watcher.cancel()

    async def _try(self, d, method: bytes, target: bytes, headers, body: bytes, client: ClientGone,
                   send) -> ApiError | None:
        """Send to one replica and answer the client; an ApiError when another replica may be tried."""
        replica: Replica = d.replica
        try:
            conn = await replica.connection(self.connect_timeout_s)
        except UpstreamError as exc:
            replica.set_state(DOWN, str(exc))
            return ApiError(502, f"replica {replica.url} unreachable", type="server_error")
        client.conn = conn
        try:
            conn.send(method, target, replica.host_header, headers, body)
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
            await self._relay(d, conn, status, resp_headers, client, send)
        finally:
            client.conn = None
            replica.release(conn)
        return None

    async def _relay(self, d, conn: UpstreamConnection, status: int, headers, client: ClientGone, send) -> None:
        stream = any(k == b"content-type" and v.startswith(b"text/event-stream") for k, v in headers)
        if not stream:
            try:
                data = b"".join([c async for c in conn.body_chunks()])
            except UpstreamError as exc:
                self._lost(d.replica, client, exc)
                return await _send_error(send, ApiError(502, f"replica {d.replica.url} failed mid-answer",
                                                        type="server_error"))
            self.router.first_token(d)
            headers.append((b"content-length", str(len(data)).encode()))
            await send({"type": "http.response.start", "status": status, "headers": headers})
            return await send({"type": "http.response.body", "body": data})
        await send({"type": "http.response.start", "status": status, "headers": headers})
        try:
            # One write per read from the replica: the last part goes with the stream's end.
            async for part, last in conn.body_parts():
                if not d.started:
                    self.router.first_token(d)
                if last:
                    return await send({"type": "http.response.body", "body": part})
                await send({"type": "http.response.body", "body": part, "more_body": True})
        except UpstreamError as exc:
            if client.gone:
                return
            self._lost(d.replica, client, exc)
            err = ApiError(502, f"replica {d.replica.url} was lost mid-stream", type="server_error",
                           code="replica_lost")
            await send({"type": "http.response.body", "body": b"data: " + err.to_body() + b"\n\n" + SSE_DONE,
                        "more_body": True})
        await send({"type": "http.response.body", "body": b""})

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
