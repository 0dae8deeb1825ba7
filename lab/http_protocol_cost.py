"""The per-request cost of TtftHttpProtocol against uvicorn's HttpToolsProtocol, without a model:
one process, uvloop, a trivial ASGI app, a keep-alive client (or a fresh connection per request)
sending small requests one at a time. Rounds alternate the two protocols (ABBA); the figures are
the median round's wall and CPU microseconds per request, client included (the same for both):
the process's CPU time, which other load on the machine disturbs less than wall time.

    python lab/http_protocol_cost.py --rounds 10 --requests 2000
"""
from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import uvicorn
import uvloop
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from pipeline.http_head import ConnectionLimits
from pipeline.http_protocol import TtftHttpProtocol

REQUEST = b"GET /health HTTP/1.1\r\nHost: cost\r\nUser-Agent: lab\r\nAccept: */*\r\n\r\n"


async def app(scope, receive, send) -> None:
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})


def factory(name: str, config: uvicorn.Config, state: ServerState):
    if name == "old":
        return lambda: HttpToolsProtocol(config, state, {})
    limits = ConnectionLimits()
    return lambda: TtftHttpProtocol(config, state, {}, limits=limits)


async def keep_alive(port: int, n: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for _ in range(n):
        writer.write(REQUEST)
        await reader.readuntil(b"ok")
    writer.close()


async def fresh(port: int, n: int) -> None:
    for _ in range(n):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(REQUEST)
        await reader.readuntil(b"ok")
        writer.close()


async def main(rounds: int, n: int) -> None:
    config = uvicorn.Config(app, lifespan="off", log_config=None)
    loop = asyncio.get_running_loop()
    servers, ports = {}, {}
    for name in ("old", "new"):
        servers[name] = await loop.create_server(factory(name, config, ServerState()), "127.0.0.1", 0)
        ports[name] = servers[name].sockets[0].getsockname()[1]
    for client in (keep_alive, fresh):
        wall: dict[str, list[float]] = {"old": [], "new": []}
        cpu: dict[str, list[float]] = {"old": [], "new": []}
        await client(ports["old"], 200), await client(ports["new"], 200)  # warm-up
        for r in range(rounds):
            for name in (("old", "new") if r % 2 == 0 else ("new", "old")):
                start, start_cpu = time.perf_counter(), time.process_time()
                await client(ports[name], n)
                wall[name].append((time.perf_counter() - start) / n * 1e6)
                cpu[name].append((time.process_time() - start_cpu) / n * 1e6)
        print(f"{client.__name__}: " + ", ".join(
            f"{k} {statistics.median(wall[k]):.1f} us wall, {statistics.median(cpu[k]):.1f} us CPU per request"
            for k in wall))


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--requests", type=int, default=2000)
    a = p.parse_args()
    uvloop.run(main(a.rounds, a.requests))
