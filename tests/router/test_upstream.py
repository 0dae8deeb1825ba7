"""UpstreamConnection against scripted servers: chunks handed on as they arrive, length bodies,
keep-alive, hop-by-hop headers dropped, the answer to a HEAD ended at its head, and every way a
replica can fail (refused, garbage, early end)."""
from __future__ import annotations

import asyncio

import pytest

from router.upstream import UpstreamConnection, UpstreamError


async def serve(script) -> tuple[asyncio.AbstractServer, int]:
    """A server on a free port whose every connection runs `script(reader, writer)`."""
    server = await asyncio.start_server(script, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def test_each_chunk_comes_out_before_the_next_is_written() -> None:
    go_on = asyncio.Event()
    seen: list[bytes] = []

    async def script(reader, writer):
        seen.append(await reader.readuntil(b"\r\n\r\n") + await reader.readexactly(2))
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
                     b"x-kept: 1\r\n\r\n5\r\nfirst\r\n")
        await go_on.wait()
        writer.write(b"6\r\nsecond\r\n0\r\n\r\n")

    server, port = await serve(script)
    conn = await UpstreamConnection.open("127.0.0.1", port, 1.0)
    conn.send(b"POST", b"/v1/completions", b"h:1", [(b"connection", b"close"), (b"x-client", b"7")], b"{}")
    status, headers = await conn.read_head()
    assert status == 200 and (b"x-kept", b"1") in headers
    assert all(k != b"transfer-encoding" for k, _ in headers)
    chunks = conn.body_chunks()
    assert await asyncio.wait_for(chunks.__anext__(), 1) == b"first"  # before the server writes more
    go_on.set()
    assert [c async for c in chunks] == [b"second"]
    assert conn.reusable
    request = seen[0]
    assert b"x-client: 7" in request and b"connection" not in request and b"content-length: 2" in request
    conn.close()
    server.close()


async def test_a_length_body_and_connection_close() -> None:
    async def script(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 4\r\nconnection: close\r\n\r\nnope")

    server, port = await serve(script)
    conn = await UpstreamConnection.open("127.0.0.1", port, 1.0)
    conn.send(b"GET", b"/x", b"h", [], b"")
    assert (await conn.read_head())[0] == 400
    assert b"".join([c async for c in conn.body_chunks()]) == b"nope"
    assert not conn.reusable
    conn.close()
    server.close()


@pytest.mark.parametrize("reply", [b"", b"garbage\r\n\r\n", b"HTTP/1.1 abc\r\n\r\n"])
async def test_no_or_a_broken_status_line_is_an_upstream_error(reply: bytes) -> None:
    async def script(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(reply)
        writer.close()

    server, port = await serve(script)
    conn = await UpstreamConnection.open("127.0.0.1", port, 1.0)
    conn.send(b"GET", b"/", b"h", [], b"")
    with pytest.raises(UpstreamError):
        await conn.read_head()
    server.close()


@pytest.mark.parametrize("body", [b"5\r\nabc", b"zz\r\n", b"3\r\nabc\r\n", b"0\r\nx-trailer: 1\r\n\r\n",
                                  b"2;ext=1\r\nab\r\n0\r\n"])
async def test_a_body_cut_short_or_malformed_is_an_upstream_error(body: bytes) -> None:
    async def script(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + body)
        writer.close()

    server, port = await serve(script)
    conn = await UpstreamConnection.open("127.0.0.1", port, 1.0)
    conn.send(b"GET", b"/", b"h", [], b"")
    await conn.read_head()
    with pytest.raises(UpstreamError):
        _ = [c async for c in conn.body_chunks()]
    assert not conn.reusable
    server.close()


async def test_a_refused_connection_is_an_upstream_error() -> None:
    server, port = await serve(lambda r, w: None)
    server.close()
    await server.wait_closed()
    with pytest.raises(UpstreamError, match="cannot connect"):
        await UpstreamConnection.open("127.0.0.1", port, 1.0)


async def test_what_arrives_together_comes_out_as_one_part_and_the_end_is_flagged() -> None:
    go_on = asyncio.Event()

    async def script(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n6\r\nsecond\r\n")
        await go_on.wait()
        writer.write(b"5\r\nthird\r\n4\r\nlast\r\n0\r\n\r\n")
        await reader.readuntil(b"\r\n\r\n")  # the next request, on the same connection
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n")

    server, port = await serve(script)
    conn = await UpstreamConnection.open("127.0.0.1", port, 1.0)
    conn.send(b"GET", b"/", b"h", [], b"")
    await conn.read_head()
    parts = conn.body_parts()
    assert await asyncio.wait_for(parts.__anext__(), 1) == (b"firstsecond", False)
    go_on.set()
    assert [p async for p in parts] == [(b"thirdlast", True)]
    assert conn.reusable
    conn.send(b"GET", b"/", b"h", [], b"")
    await conn.read_head()
    assert [p async for p in conn.body_parts()] == [(b"", True)]
    assert not conn.reusable  # bytes past the end of a response: never reused
    conn.close()
    server.close()



async def test_a_response_read_whole_in_one_read_keeps_the_connection_alive() -> None:
    async def script(reader, writer):
        while True:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")

    server, port = await serve(script)
    conn = await UpstreamConnection.open("127.0.0.1", port, 1.0)
    for _ in range(3):  # head, body and end parsed in one go each time, on one connection
        conn.send(b"GET", b"/", b"h", [], b"")
        assert (await conn.read_head())[0] == 200
        assert [c async for c in conn.body_chunks()] == [b"{}"]
        assert conn.reusable and conn.is_usable()
    conn.close()
    server.close()


@pytest.mark.parametrize("framing, kept", [(b"content-length: 42\r\n", [(b"content-length", b"42")]),
                                           (b"transfer-encoding: chunked\r\n", [])])
async def test_the_answer_to_a_head_ends_at_its_head_with_its_length_and_is_not_reused(framing, kept) -> None:
    async def script(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n" + framing + b"\r\n")
        await reader.read()  # the connection stays open: its end must not be what ends the answer

    server, port = await serve(script)
    conn = await UpstreamConnection.open("127.0.0.1", port, 1.0)
    conn.send(b"HEAD", b"/v1/models", b"h", [], b"")
    status, headers = await asyncio.wait_for(conn.read_head(), 1)
    assert status == 200 and headers == [(b"content-type", b"application/json")] + kept

    async def parts():
        return [p async for p in conn.body_parts()]

    assert await asyncio.wait_for(parts(), 1) == [(b"", True)]
    assert not conn.reusable  # the parser would take the next answer's bytes for this one's body
    conn.close()
    server.close()
