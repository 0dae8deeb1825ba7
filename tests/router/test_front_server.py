"""FrontServer against raw sockets: a response's head leaves with its first body part, keep-alive
and pipelined requests are answered in order, a body over the limit gets its 413 (whole, not a
reset), a malformed request a 400, `Expect: 100-continue` its interim answer, HEAD no body, an app
that fails a 500 or a closed connection, a stop waits for the request in flight, and no request is
started while the client's socket buffer is full."""
from __future__ import annotations

import asyncio
import contextlib
import socket

import orjson
import pytest

from router.front_server import FrontServer

LIMIT = 1000
GONE: list[str] = []  # paths whose client went away mid-answer, told by the channel's callback


async def app(scope, receive, send) -> None:
    if scope["type"] == "lifespan":
        while (message := await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        return await send({"type": "lifespan.shutdown.complete"})
    path = scope["path"]
    body = (await receive())["body"]
    if path == "/fail":
        raise RuntimeError("the app fails before its head")
    if path == "/fail-late":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        raise RuntimeError("the app fails after its head")
    if path == "/wait-for-gone":
        scope["extensions"]["ttft.channel"].on_gone(lambda: GONE.append(path))
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
        while not GONE:
            await asyncio.sleep(0.01)
        return
    if path == "/echo":
        out = orjson.dumps({"path": path, "query": scope["query_string"].decode(), "body": body.decode(),
                            "method": scope["method"]})
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(len(out)).encode())]})
        return await send({"type": "http.response.body", "body": out})
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    await asyncio.sleep({"/slow": 0.2, "/long": 0.7}.get(path, 0.05))  # the first token comes later: the head waits for it
    await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
    await send({"type": "http.response.body", "body": b""})


@contextlib.asynccontextmanager
async def serving():
    """A FrontServer on a free port, running `app` until the block ends: (server, port)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    server = FrontServer(app, LIMIT, keep_alive_s=0.5, shutdown_s=2.0)
    started = asyncio.Event()
    task = asyncio.create_task(server.serve([sock], started.set))
    await started.wait()
    try:
        yield server, sock.getsockname()[1]
    finally:
        server.stop()
        await asyncio.wait_for(task, 5)


async def read_response(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return head + await reader.readexactly(int(line.split(b":")[1]))
    return head + await reader.readuntil(b"0\r\n\r\n")


async def test_the_head_leaves_with_the_first_part_and_keep_alive_and_pipelining_hold() -> None:
    async with serving() as (_, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /stream HTTP/1.1\r\nhost: x\r\n\r\n")
        first = await reader.read(65536)  # one read: whatever the first send carried
        assert first.startswith(b"HTTP/1.1 200 OK\r\n") and b"transfer-encoding: chunked" in first
        assert b"\r\n\r\n9\r\ndata: 1\n\n\r\n" in first, first
        if not first.endswith(b"0\r\n\r\n"):
            first += await reader.readuntil(b"0\r\n\r\n")
        # two requests in one write: two answers, in order, on the same connection
        writer.write(b"POST /echo?a=1 HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\n\r\nabc"
                     b"POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n2\r\nde\r\n0\r\n\r\n")
        one, two = await read_response(reader), await read_response(reader)
        assert orjson.loads(one.split(b"\r\n\r\n", 1)[1]) == {"path": "/echo", "query": "a=1", "body": "abc",
                                                              "method": "POST"}
        assert orjson.loads(two.split(b"\r\n\r\n", 1)[1])["body"] == "de"
        writer.write(b"HEAD /stream HTTP/1.1\r\nhost: x\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2)
        assert head.startswith(b"HTTP/1.1 200") and b"text/event-stream" in head
        writer.write(b"GET /echo HTTP/1.1\r\nhost: x\r\n\r\n")  # no body came after the HEAD's head
        assert (await read_response(reader)).startswith(b"HTTP/1.1 200")
        assert await asyncio.wait_for(reader.read(1), 2) == b""  # idle past keep_alive_s: closed
        writer.close()


@pytest.mark.parametrize("request_bytes", [
    b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 5000\r\n\r\n" + b"x" * 5000,
    b"POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n" + b"3e8\r\n" + b"y" * 1000 + b"\r\n"
    + b"1\r\nz\r\n0\r\n\r\n",
])
async def test_a_body_over_the_limit_is_read_and_answered_413_then_the_connection_goes_on(request_bytes) -> None:
    async with serving() as (_, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request_bytes)
        answer = await asyncio.wait_for(read_response(reader), 2)
        assert answer.startswith(b"HTTP/1.1 413 ")
        assert orjson.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]["message"] == f"request body over {LIMIT} bytes"
        writer.write(b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\nok")
        assert b'"body":"ok"' in await asyncio.wait_for(read_response(reader), 2)
        writer.close()


async def test_expect_100_continue_gets_its_interim_answer_unless_the_body_is_too_large() -> None:
    async with serving() as (_, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /echo HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\ncontent-length: 2\r\n\r\n")
        assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2) == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(b"hi")
        assert b'"body":"hi"' in await asyncio.wait_for(read_response(reader), 2)
        writer.write(b"POST /echo HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\ncontent-length: 5000\r\n\r\n")
        answer = await asyncio.wait_for(read_response(reader), 2)  # at once: the body never comes
        assert answer.startswith(b"HTTP/1.1 413") and b"connection: close" in answer
        writer.close()


@pytest.mark.parametrize("garbage, status", [(b"NOT HTTP AT ALL\r\n\r\n", b"400"),
                                             (b"GET / HTTP/1.1\r\nbad header line\r\n\r\n", b"400"),
                                             (b"GET / HTTP/1.1\r\n" + b"x-h: v\r\n" * 200 + b"\r\n", b"431")])
async def test_a_malformed_or_huge_head_is_answered_and_closed(garbage, status) -> None:
    async with serving() as (_, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(garbage)
        answer = await asyncio.wait_for(reader.read(65536), 2)
        assert answer.startswith(b"HTTP/1.1 " + status + b" ") and b"connection: close" in answer
        assert await asyncio.wait_for(reader.read(1), 2) == b""
        writer.close()


async def test_an_app_that_fails_gets_a_500_or_a_closed_connection_and_nothing_hangs() -> None:
    async with serving() as (_, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /fail HTTP/1.1\r\nhost: x\r\n\r\n")
        answer = await asyncio.wait_for(reader.read(65536), 2)
        assert answer.startswith(b"HTTP/1.1 500 ") and b"internal router error" in answer
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /fail-late HTTP/1.1\r\nhost: x\r\n\r\n")
        assert await asyncio.wait_for(reader.read(65536), 2) == b""  # its head was never sent
        writer.close()


async def test_a_stop_lets_the_request_in_flight_finish() -> None:
    async with serving() as (server, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /slow HTTP/1.1\r\nhost: x\r\n\r\n")
        await asyncio.sleep(0.05)
        server.stop()
        answer = await asyncio.wait_for(reader.read(65536), 2)
        if not answer.endswith(b"0\r\n\r\n"):
            answer += await asyncio.wait_for(reader.readuntil(b"0\r\n\r\n"), 2)
        assert b"data: 1" in answer and b"connection: close" not in answer
        assert await asyncio.wait_for(reader.read(1), 2) == b""  # then closed
        writer.close()


async def test_an_http_1_0_client_gets_no_chunks_and_the_end_of_the_connection_ends_the_stream() -> None:
    async with serving() as (_, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /stream HTTP/1.0\r\nhost: x\r\n\r\n")
        answer = await asyncio.wait_for(reader.read(), 2)  # to the end: the server closes
        head, body = answer.split(b"\r\n\r\n", 1)
        assert head.startswith(b"HTTP/1.1 200") and b"chunked" not in head and b"connection: close" in head
        assert body == b"data: 1\n\n"
        writer.close()


async def test_a_request_longer_than_the_keep_alive_is_not_cut_and_the_idle_clock_starts_after_it() -> None:
    async with serving() as (_, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /long HTTP/1.1\r\nhost: x\r\n\r\n")  # 0.7 s, keep_alive_s 0.5
        assert b"data: 1" in await asyncio.wait_for(read_response(reader), 2)
        await asyncio.sleep(0.25)  # idle, but not for keep_alive_s since the answer
        writer.write(b"GET /echo HTTP/1.1\r\nhost: x\r\n\r\n")
        assert (await asyncio.wait_for(read_response(reader), 2)).startswith(b"HTTP/1.1 200")
        assert await asyncio.wait_for(reader.read(1), 2) == b""  # then idle: closed
        writer.close()


async def test_the_channel_tells_the_app_when_the_client_goes_away() -> None:
    GONE.clear()
    async with serving() as (_, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /wait-for-gone HTTP/1.1\r\nhost: x\r\n\r\n")
        assert b"data: 1" in await asyncio.wait_for(reader.readuntil(b"data: 1\n\n"), 2)
        writer.close()
        for _ in range(200):
            if GONE:
                break
            await asyncio.sleep(0.01)
        assert GONE == ["/wait-for-gone"]


async def test_a_request_waits_while_the_clients_buffer_is_full_then_goes() -> None:
    async with serving() as (server, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /echo HTTP/1.1\r\nhost: x\r\n\r\n")
        await asyncio.wait_for(read_response(reader), 2)
        (conn,) = server.connections
        conn.pause_writing()  # as the transport does when the client's socket buffer fills
        writer.write(b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 1\r\n\r\na")
        await asyncio.sleep(0.1)
        assert conn.queue and conn.current is None  # parsed, not answered: no answer piles up unread
        conn.resume_writing()
        assert b'"body":"a"' in await asyncio.wait_for(read_response(reader), 2)
        writer.close()
