"""Instructions per request of TtftHttpProtocol against uvicorn's HttpToolsProtocol, counted by
callgrind, which a loaded machine does not disturb (wall and CPU time on a shared 2-core host vary
by more than the difference measured). The protocol parses requests from a stub transport and
answers them with a trivial app: no sockets, no client.

    for n in 1000 4000; do valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        python lab/http_protocol_icount.py old keep-alive $n 2>&1 | grep Collected; done

(instructions per request: the difference of the two totals / 3000; `fresh`: a connection per
request, opened and lost around it.)
"""
from __future__ import annotations

import asyncio
import sys

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


class StubTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.closing = False

    def write(self, data) -> None:
        pass

    def get_extra_info(self, name, default=None):
        return {"sockname": ("127.0.0.1", 1), "peername": ("127.0.0.1", 2)}.get(name, default)

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def main(kind: str, mode: str, n: int) -> None:
    config = uvicorn.Config(app, lifespan="off", log_config=None)
    state, limits = ServerState(), ConnectionLimits()

    def protocol() -> HttpToolsProtocol:
        if kind == "old":
            return HttpToolsProtocol(config, state, {})
        return TtftHttpProtocol(config, state, {}, limits=limits)

    if mode == "keep-alive":
        proto = protocol()
        proto.connection_made(StubTransport())
    for _ in range(n):
        if mode == "fresh":
            proto = protocol()
            proto.connection_made(StubTransport())
        proto.data_received(REQUEST)
        await asyncio.sleep(0)  # the app's task runs
        if mode == "fresh":
            proto.connection_lost(None)


if __name__ == "__main__":
    kind_, mode_, n_ = sys.argv[1], sys.argv[2], int(sys.argv[3])
    assert kind_ in ("old", "new") and mode_ in ("keep-alive", "fresh"), sys.argv
    uvloop.run(main(kind_, mode_, n_))
