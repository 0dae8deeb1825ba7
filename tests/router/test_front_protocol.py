"""RouterHttpProtocol under a real uvicorn server: a response's head leaves with its first body part
(a client's first read holds both, even when the app sends the body later), and HEAD, whole bodies,
an app that fails before its body and keep-alive still work as uvicorn's own protocol does."""
from __future__ import annotations

import asyncio

import uvicorn

from router.front_protocol import RouterHttpProtocol


async def app(scope, receive, send) -> None:
    if scope["type"] != "http":
        return
    path = scope["path"]
    if path == "/fail":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        raise RuntimeError("the app fails after its head")
    if path == "/whole":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"5")]})
        return await send({"type": "http.response.body", "body": b"whole"})
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    await asyncio.sleep(0.2)  # the first token comes later: the head must wait for it
    await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
    await send({"type": "http.response.body", "body": b""})


async def read_response(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    if b"content-length: 5" in head:
        return head + await reader.readexactly(5)
    if head.startswith(b"HTTP/1.1 200") and b"chunked" in head:
        return head + await reader.readuntil(b"0\r\n\r\n")
    return head


async def test_the_head_leaves_with_the_first_body_part() -> None:
    config = uvicorn.Config(app, host="127.0.0.1", port=0, loop="asyncio", http=RouterHttpProtocol,
                            lifespan="off", log_level="critical")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /stream HTTP/1.1\r\nhost: x\r\n\r\n")
        first = await reader.read(65536)  # one read: whatever the first send carried
        assert first.startswith(b"HTTP/1.1 200") and b"data: 1\n\n" in first, first
        rest = first + await reader.readuntil(b"0\r\n\r\n") if not first.endswith(b"0\r\n\r\n") else first
        assert rest.endswith(b"\r\n0\r\n\r\n")
        # the same connection: a whole body, then HEAD (a head with no body to ride on)
        writer.write(b"GET /whole HTTP/1.1\r\nhost: x\r\n\r\n")
        assert (await read_response(reader)).endswith(b"\r\n\r\nwhole")
        writer.write(b"HEAD /stream HTTP/1.1\r\nhost: x\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2)
        assert head.startswith(b"HTTP/1.1 200") and b"text/event-stream" in head
        writer.close()
        # an app that fails after its head: the connection ends, nothing hangs
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /fail HTTP/1.1\r\nhost: x\r\n\r\n")
        assert await asyncio.wait_for(reader.read(65536), 2) == b""  # its head was never sent
        writer.close()
    finally:
        server.should_exit = True
        await task
