"""The floor under any router written on uvloop: a byte pipe in front of a replica, each client
connection paired with its own replica connection, bytes copied both ways from the transports'
callbacks with no HTTP parsing, no routing and no task. What `lab.router_overhead` measures through
it is what the two extra loopback hops and the two wake-ups of a process in the path cost on this
machine; what `ttft route` adds above that is its own work.

    python -m lab.router_floor --replica-url http://127.0.0.1:8000 --port 8101
    python -m lab.router_overhead --replica-url http://127.0.0.1:8000 --router-url http://127.0.0.1:8101

Not a router: no /health of its own (it passes the replica's on), one replica, nothing else.
"""
from __future__ import annotations

import argparse
import asyncio
import socket
from urllib.parse import urlsplit

import uvloop


class _Half(asyncio.Protocol):
    """One side of a pair: what it receives is written to its peer; either end closing closes both."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _Half | None = None
        self.pending: list[bytes] = []  # what came before the peer's connection was made

    def connection_made(self, transport) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is not None and peer.transport is not None:
            peer.transport.write(data)
        else:
            self.pending.append(data)

    def connection_lost(self, exc) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()


class _Client(_Half):
    def __init__(self, host: str, port: int) -> None:
        super().__init__()
        self.host, self.port = host, port

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        try:
            _, upstream = await asyncio.get_running_loop().create_connection(_Half, self.host, self.port)
        except OSError:
            self.transport.close()
            return
        upstream.peer, self.peer = self, upstream
        for data in self.pending:
            upstream.transport.write(data)
        self.pending = []


async def serve(replica_url: str, port: int) -> None:
    parts = urlsplit(replica_url)
    host, rport = parts.hostname or "127.0.0.1", parts.port or 80
    server = await asyncio.get_running_loop().create_server(lambda: _Client(host, rport), "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--replica-url", required=True)
    p.add_argument("--port", type=int, required=True)
    a = p.parse_args()
    uvloop.run(serve(a.replica_url, a.port))
