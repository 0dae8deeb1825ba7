"""Where the router's CPU goes per request, in one process: a scripted replica (a canned one-token
SSE answer), `ttft route`'s app under its front server (uvicorn for a checkout from before
router/front_server.py), and a client sending
streamed completions one at a time, all on one uvloop loop under cProfile. The replica and client
are as cheap as asyncio streams allow, so what the profile shows above them is the router's.

    python -m lab.router_path_profile --num-requests 3000 [--top 40]
    PYTHONPATH=/work/main python lab/router_path_profile.py --top 0   # another checkout's router, unprofiled

With `--top 0` nothing is profiled: the CPU per request of the whole process (router, scripted
replica and client together) is what two checkouts' routers can be compared by.
"""
from __future__ import annotations

import argparse
import asyncio
import cProfile
import importlib
import pstats
import socket
import time

import uvicorn
import uvloop

from router.core import Router
from router.proxy import RouterApp

try:
    from router.front_server import FrontServer
except ImportError:  # a checkout from before it: uvicorn, with the router's protocol if it has one
    FrontServer = None
try:
    RouterHttpProtocol = importlib.import_module("router.front_protocol").RouterHttpProtocol
except ImportError:
    RouterHttpProtocol = "httptools"

SSE = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
       b"x-request-id: cmpl-1\r\nx-ttft-queue-ms: 0.1\r\nx-ttft-prefill-ms: 1.0\r\n\r\n")
CHUNK = b'data: {"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"x"}]}\n\n'
BODY = b'{"model":"dummy:tiny","prompt":"' + b"x " * 100 + b'","max_tokens":1,"stream":true}'


async def replica(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while True:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        await reader.readexactly(length)
        if head.startswith(b"GET"):
            body = b'{"status":"ready","num_waiting":0,"num_running":0}'
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
            continue
        writer.write(SSE + b"%x\r\n%s\r\n" % (len(CHUNK), CHUNK) + b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")


async def main(num: int, top: int) -> None:
    rserver = await asyncio.start_server(replica, "127.0.0.1", 0)
    rport = rserver.sockets[0].getsockname()[1]
    router = Router([f"http://127.0.0.1:{rport}"])
    if FrontServer is not None:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        port = sock.getsockname()[1]
        app = RouterApp(router)
        try:
            server = FrontServer(app, 16 * 1024 * 1024, forward=app)
        except TypeError:  # a checkout from before the forwarded POSTs
            server = FrontServer(app, 16 * 1024 * 1024)
        started = asyncio.Event()
        task = asyncio.create_task(server.serve([sock], started.set))
        await started.wait()
    else:
        config = uvicorn.Config(RouterApp(router), host="127.0.0.1", port=0, http=RouterHttpProtocol, lifespan="on",
                                log_level="warning", access_log=False, server_header=False, date_header=False,
                                proxy_headers=False)
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    request = (b"POST /v1/completions HTTP/1.1\r\nhost: r\r\ncontent-type: application/json\r\n"
               b"content-length: %d\r\n\r\n%s" % (len(BODY), BODY))

    async def one() -> None:
        writer.write(request)
        await reader.readuntil(b"0\r\n\r\n")

    for _ in range(200):
        await one()
    profile = cProfile.Profile()
    t0, c0 = time.perf_counter(), time.process_time()
    if top:
        profile.enable()
    for _ in range(num):
        await one()
    profile.disable()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"{num} requests: {wall / num * 1e6:.0f} us wall, {cpu / num * 1e6:.0f} us CPU each"
          f"{' (profiled)' if top else ''}")
    if top:
        pstats.Stats(profile).sort_stats("tottime").print_stats(top)
    writer.close()
    if FrontServer is not None:
        server.stop()
    else:
        server.should_exit = True
    await task
    rserver.close()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--num-requests", type=int, default=3000)
    p.add_argument("--top", type=int, default=40)
    a = p.parse_args()
    uvloop.run(main(a.num_requests, a.top))
