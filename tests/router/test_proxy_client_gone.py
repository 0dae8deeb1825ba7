"""RouterApp when the client goes away while a replica connection is being made: nothing is sent to
the replica and nothing is written to the client (a replica scripted to record what reaches it)."""
from __future__ import annotations

import asyncio

from router.client_channel import ClientChannel
from router.core import Router
from router.proxy import RouterApp
from router.replica import READY


class Recorder:
    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(data)


async def test_a_client_gone_during_the_connect_sends_nothing_to_the_replica() -> None:
    received: list[bytes] = []

    async def replica(reader, writer):
        received.append(await reader.read(65536))

    server = await asyncio.start_server(replica, "127.0.0.1", 0)
    router = Router([f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"])
    r = router.replicas[0]
    r.state = READY
    out = Recorder()
    channel = ClientChannel(out, "1.1", False, keep_alive=True)
    connect = r.connection

    async def connection_then_client_gone(timeout_s: float):
        conn = await connect(timeout_s)
        channel.lost()  # the client's connection closed meanwhile
        return conn

    r.connection = connection_then_client_gone
    scope = {"type": "http", "method": "POST", "path": "/v1/completions", "raw_path": b"/v1/completions",
             "query_string": b"", "headers": [], "extensions": {"ttft.channel": channel}}

    async def receive() -> dict:
        return {"type": "http.request", "body": b'{"prompt":"hi","stream":true}', "more_body": False}

    async def send(message: dict) -> None:
        raise AssertionError(f"nothing is sent to a client gone: {message}")

    await asyncio.wait_for(RouterApp(router)(scope, receive, send), 2)  # not waiting on the replica
    await asyncio.sleep(0.05)
    assert received in ([], [b""]) and out.writes == []  # the replica saw at most the connection close
    assert r.load.num_in_flight == 0 and not r.busy
    server.close()
