"""lab/router_floor.py in front of a scripted server: bytes pass both ways unchanged (also what the
client sent before the pipe's own connection was made), the upstream closing closes the client, and an
upstream that refuses closes the client instead of hanging it."""
from __future__ import annotations

import asyncio
import socket

from lab.router_floor import serve


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def started_floor(upstream_port: int) -> tuple[asyncio.Task, int]:
    port = free_port()
    task = asyncio.create_task(serve(f"http://127.0.0.1:{upstream_port}", port))
    for _ in range(200):
        try:
            _, w = await asyncio.open_connection("127.0.0.1", port)
            w.close()
            return task, port
        except OSError:
            await asyncio.sleep(0.01)
    raise AssertionError("the floor did not listen")


async def test_bytes_pass_both_ways_and_the_upstream_closing_closes_the_client() -> None:
    async def upstream(reader, writer):
        data = await reader.readexactly(10)
        writer.write(data.upper())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(upstream, "127.0.0.1", 0)
    task, port = await started_floor(server.sockets[0].getsockname()[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"hello")  # at once: before the pipe's upstream connection is made
    writer.write(b"world")
    assert await asyncio.wait_for(reader.readexactly(10), 2) == b"HELLOWORLD"
    assert await asyncio.wait_for(reader.read(1), 2) == b""
    writer.close()
    task.cancel()
    server.close()


async def test_a_refused_upstream_closes_the_client() -> None:
    task, port = await started_floor(free_port())  # nothing listens there
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"x")
    assert await asyncio.wait_for(reader.read(1), 2) == b""
    writer.close()
    task.cancel()
