"""TtftHttpProtocol on a real loopback socket in this process (uvloop, as `ttft serve` runs it):
the header-read and keep-alive clocks, the head limits, the connection cap, pipelined requests
whose client is gone, and HTTP/1.0 framing. Attacks on a whole server: tests/hostile/."""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import replace

import orjson
import uvicorn
import uvloop
from starlette.types import Receive, Scope, Send
from uvicorn.server import ServerState

from pipeline.http_head import ConnectionLimits
from pipeline.http_protocol import TtftHttpProtocol

LIMITS = ConnectionLimits(header_read_timeout_s=0.3, max_headers=20, max_header_bytes=2048, max_url_bytes=256,
                          max_open_connections=100, num_probe_slots=4)


class App:
    """Answers every request with its path, `delay_s` after reading it (and listening for a
    disconnect meanwhile); `/stream` in three parts without a Content-Length."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.paths: list[str] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        self.paths.append(scope["path"])
        await receive()  # the body; then listen for a disconnect while answering, as ttft's routes do
        watch = asyncio.create_task(receive())
        await asyncio.sleep(self.delay_s)
        watch.cancel()
        if scope["path"] == "/stream":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            for part in (b"one ", b"two ", b"three"):
                await send({"type": "http.response.body", "body": part, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        body = scope["path"].encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


@contextlib.asynccontextmanager
async def serving(app: App, limits: ConnectionLimits = LIMITS, keep_alive_s: float = 5.0):
    config = uvicorn.Config(app, lifespan="off", log_config=None, timeout_keep_alive=keep_alive_s)  # type: ignore[arg-type]
    state = ServerState()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: TtftHttpProtocol(config, state, {}, limits=limits), "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], state
    finally:
        server.close()
        for conn in list(state.connections):
            conn.transport.close()
        await asyncio.sleep(0.01)


def run(coro) -> None:
    uvloop.run(coro)


async def connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


async def read_until_closed(reader: asyncio.StreamReader, timeout_s: float = 5.0) -> tuple[bytes, float]:
    """Everything until the server closes the connection, and how long that took."""
    start = time.monotonic()
    data = await asyncio.wait_for(reader.read(), timeout_s)
    return data, time.monotonic() - start


def get(path: str, version: str = "1.1", headers: bytes = b"") -> bytes:
    return f"GET {path} HTTP/{version}\r\nHost: t\r\n".encode() + headers + b"\r\n"


def error_of(response: bytes) -> tuple[int, dict[bytes, bytes], dict]:
    head, _, body = response.partition(b"\r\n\r\n")
    status_line, *lines = head.split(b"\r\n")
    headers = dict(line.split(b": ", 1) for line in lines)
    return int(status_line.split()[1]), headers, orjson.loads(body)["error"]


def test_a_silent_connection_is_closed_at_the_header_timeout() -> None:
    async def main() -> None:
        async with serving(App()) as (port, _):
            reader, _ = await connect(port)
            data, took_s = await read_until_closed(reader)
            assert data == b"" and 0.25 <= took_s < 1.5, took_s
    run(main())


def test_half_sent_headers_are_closed_at_the_header_timeout_even_when_trickled() -> None:
    async def main() -> None:
        app = App()
        async with serving(app) as (port, _):
            reader, writer = await connect(port)
            writer.write(b"GET /x HTTP/1.1\r\n")
            start = time.monotonic()
            with contextlib.suppress(ConnectionError):
                # uvloop closes the client's transport at the server's EOF: a write after that
                # raises RuntimeError, not ConnectionError, so the writes stop once it is closing
                while not reader.at_eof() and not writer.is_closing() and time.monotonic() - start < 3:
                    writer.write(b"X-Slow: 1\r\n")  # a byte now and then never resets the clock
                    await asyncio.sleep(0.05)
            # closed: an EOF, or a reset (the server closed with our last header bytes unread)
            closed = reader.at_eof()
            if not closed:
                try:
                    closed = await reader.read() == b""
                except ConnectionResetError:
                    closed = True
            assert closed
            assert time.monotonic() - start < 1.5 and app.paths == []
    run(main())


def test_after_a_response_the_keep_alive_timeout_closes_an_idle_connection() -> None:
    async def main() -> None:
        async with serving(App(), replace(LIMITS, header_read_timeout_s=5.0), keep_alive_s=0.3) as (port, _):
            reader, writer = await connect(port)
            writer.write(get("/a"))
            data, took_s = await read_until_closed(reader)
            assert data.startswith(b"HTTP/1.1 200") and data.endswith(b"/a")
            assert 0.25 <= took_s < 1.5, took_s  # the keep-alive clock, not the 5 s header one
    run(main())


def test_a_half_sent_head_after_a_response_is_closed_at_the_header_timeout() -> None:
    async def main() -> None:
        async with serving(App(), keep_alive_s=5.0) as (port, _):
            reader, writer = await connect(port)
            writer.write(get("/a"))
            await reader.readuntil(b"/a")
            writer.write(b"GET /b HTTP/1.1\r\nHost: t\r\n")  # never finished
            data, took_s = await read_until_closed(reader)
            assert data == b"" and 0.25 <= took_s < 1.5, took_s  # the header clock, not the 5 s keep-alive
    run(main())


def test_the_header_clock_waits_while_a_response_is_in_progress() -> None:
    async def main() -> None:
        app = App(delay_s=0.6)  # twice the header timeout
        async with serving(app) as (port, _):
            reader, writer = await connect(port)
            writer.write(get("/slow") + b"GET /next HTTP/1.1\r\n")  # the next head, half sent
            data, took_s = await read_until_closed(reader)
            assert data.startswith(b"HTTP/1.1 200") and data.endswith(b"/slow")
            assert 0.8 <= took_s < 2.0, took_s  # answered, then the header timeout from the end of it
            assert app.paths == ["/slow"]
    run(main())


async def refused(port: int, request: bytes) -> tuple[int, dict[bytes, bytes], dict]:
    reader, writer = await connect(port)
    writer.write(request)
    data, _ = await read_until_closed(reader)
    return error_of(data)


def test_a_url_over_the_limit_is_414_and_never_reaches_the_app() -> None:
    async def main() -> None:
        app = App()
        async with serving(app) as (port, _):
            status, headers, err = await refused(port, get("/" + "u" * 300))
            assert status == 414 and err["code"] == "uri_too_long" and "256 bytes" in err["message"]
            assert headers[b"connection"] == b"close" and headers[b"content-type"] == b"application/json"
            reader, writer = await connect(port)
            writer.write(get("/" + "u" * 255))  # at the limit: served
            assert (await reader.readuntil(b"u" * 255)).startswith(b"HTTP/1.1 200")
            writer.close()
        assert app.paths == ["/" + "u" * 255]
    run(main())


def test_too_many_headers_or_header_bytes_are_431() -> None:
    async def main() -> None:
        app = App()
        async with serving(app) as (port, _):
            status, _, err = await refused(port, get("/h", headers=b"X-A: 1\r\n" * 21))
            assert status == 431 and err["code"] == "request_header_fields_too_large" and "20 headers" in err["message"]
            status, _, err = await refused(port, get("/h", headers=b"X-Big: " + b"b" * 2100 + b"\r\n"))
            assert status == 431 and "2048 bytes" in err["message"]
            assert app.paths == []
            reader, writer = await connect(port)
            writer.write(get("/ok", headers=b"X-A: 1\r\n" * 19))
            assert (await reader.readuntil(b"/ok")).startswith(b"HTTP/1.1 200")
    run(main())


def test_an_endless_header_is_refused_once_past_the_limit_not_at_its_end() -> None:
    async def main() -> None:
        app = App()
        async with serving(app) as (port, _):
            reader, writer = await connect(port)
            writer.write(b"GET /h HTTP/1.1\r\nX-Endless: ")
            answer = asyncio.create_task(reader.readuntil(b"}}"))
            num_sent = 0
            while not answer.done() and num_sent < 8 * 1024 * 1024:
                writer.write(b"e" * 1024)
                num_sent += 1024
                await writer.drain()
                await asyncio.sleep(0)
            status, _, err = error_of(await answer)
            assert status == 431 and num_sent < 512 * 1024, num_sent
            assert app.paths == []
    run(main())


def test_a_url_sent_in_pieces_is_414_once_past_the_limit() -> None:
    async def main() -> None:
        async with serving(App()) as (port, _):
            reader, writer = await connect(port)
            writer.write(b"GET /")
            for _ in range(5):
                await asyncio.sleep(0.02)
                writer.write(b"u" * 100)  # the head is never finished
            status, _, err = error_of((await read_until_closed(reader))[0])
            assert status == 414 and err["code"] == "uri_too_long"
    run(main())


def test_a_malformed_head_still_gets_uvicorns_400() -> None:
    async def main() -> None:
        app = App()
        async with serving(app) as (port, _):
            reader, writer = await connect(port)
            writer.write(b"GET /x HTTP/1.1\r\nNo colon here\r\n\r\n")
            data, _ = await read_until_closed(reader)
            assert data.startswith(b"HTTP/1.1 400") and data.endswith(b"Invalid HTTP request received.")
            assert app.paths == []
    run(main())


def test_pipelined_requests_longer_together_than_one_head_are_all_answered() -> None:
    async def main() -> None:
        app = App()
        async with serving(app) as (port, _):
            reader, writer = await connect(port)
            one = get("/p", headers=b"X-Pad: " + b"p" * 1000 + b"\r\n")
            writer.write(one * 40)  # 40 KB in one write: many heads per chunk, each within limits
            for _ in range(40):
                await reader.readuntil(b"/p")
            assert app.paths == ["/p"] * 40
            writer.close()
    run(main())


def test_past_the_connection_cap_requests_get_our_503_and_probes_their_own_slots() -> None:
    async def main() -> None:
        app = App()
        async with serving(app, replace(LIMITS, max_open_connections=3, header_read_timeout_s=5.0)) as (port, _):
            silent = [await connect(port) for _ in range(3)]
            status, headers, err = await refused(port, get("/v1/models"))
            assert status == 503 and headers[b"retry-after"] == b"1" and err["type"] == "overloaded_error"
            for probe in ("/health", "/live"):
                reader, writer = await connect(port)
                writer.write(get(probe))
                assert (await reader.readuntil(probe.encode())).startswith(b"HTTP/1.1 200")
                writer.close()
            assert app.paths == ["/health", "/live"]
            for _, writer in silent:
                writer.close()
    run(main())


def test_probes_past_their_slots_are_refused_too() -> None:
    async def main() -> None:
        app = App(delay_s=1.0)
        limits = replace(LIMITS, max_open_connections=1, num_probe_slots=2, header_read_timeout_s=5.0)
        async with serving(app, limits) as (port, _):
            held = []
            for _ in range(3):  # 1 past the cap + 2 probe slots, all answering for a second
                reader, writer = await connect(port)
                writer.write(get("/health"))
                held.append((reader, writer))
                await asyncio.sleep(0.05)
            status, _, err = await refused(port, get("/health"))
            assert status == 503 and err["code"] == "overloaded"
            for reader, _ in held:
                assert (await reader.readuntil(b"/health")).startswith(b"HTTP/1.1 200")
    run(main())


def test_a_client_gone_mid_pipeline_logs_no_error(caplog) -> None:
    async def main() -> None:
        app = App(delay_s=0.05)
        async with serving(app) as (port, state):
            _, writer = await connect(port)
            writer.write(get("/p") * 20)
            await writer.drain()
            writer.close()
            await asyncio.sleep(0.5)
            assert len(app.paths) < 20  # those still queued when the client left never ran
            assert not state.tasks
    with caplog.at_level(logging.WARNING):
        run(main())
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


def test_http10_streams_are_close_delimited_and_whole_bodies_keep_their_length() -> None:
    async def main() -> None:
        async with serving(App()) as (port, _):
            reader, writer = await connect(port)
            writer.write(get("/stream", version="1.0"))
            data, _ = await read_until_closed(reader)
            head, _, body = data.partition(b"\r\n\r\n")
            assert b"transfer-encoding" not in head.lower() and b"connection: close" in head.lower()
            assert body == b"one two three"
            reader, writer = await connect(port)
            writer.write(get("/whole", version="1.0"))
            data, _ = await read_until_closed(reader)
            assert b"content-length: 6" in data.lower() and data.endswith(b"\r\n\r\n/whole")
            reader, writer = await connect(port)
            writer.write(get("/stream"))  # HTTP/1.1 keeps chunked coding
            assert b"transfer-encoding: chunked" in (await reader.readuntil(b"0\r\n\r\n")).lower()
            writer.close()
    run(main())
