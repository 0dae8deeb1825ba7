"""RouterApp under its FrontServer in one process, in front of scripted replicas: the POSTs handed to
`forward` from the parser's callback (a stream with no task, the replica connection kept alive,
pipelined requests in order) and every way that path hands over to the task path or ends early (a
whole JSON answer, a replica that hangs up before its head, a client gone, a replica lost
mid-stream, a stop while a stream is in flight); and a HEAD, which ends at the replica's head."""
from __future__ import annotations

import asyncio
import contextlib
import re
import socket

import orjson

from router.core import Router
from router.front_server import FrontServer
from router.proxy import RouterApp

STATE = b'{"status":"ready","num_waiting":0,"num_running":0}'
SSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class ScriptedReplica:
    """Answers by the request's prompt: "json" a whole answer, "hang-up" a close before any head (if
    `hangs_up`, else a stream),
    "long" a stream held after its first event until `go_on`, "lost" a stream cut after its first
    event, anything else a one-event stream written at once. Records (connection number, prompt)."""

    def __init__(self) -> None:
        self.posts: list[tuple[int, str]] = []
        self.num_connections = 0
        self.num_post_connections_closed = 0
        self.go_on = asyncio.Event()
        self.hangs_up = False
        self.server: asyncio.AbstractServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.num_connections += 1
        number, posted = self.num_connections, False
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                body = await reader.readexactly(length)
                if head.startswith(b"GET /replica/state"):
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(STATE), STATE))
                    continue
                if head.startswith(b"HEAD "):  # a length, and no body after it
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 42\r\n\r\n")
                    continue
                if not head.startswith(b"POST "):
                    writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                    continue
                posted = True
                prompt = orjson.loads(body)["prompt"]
                self.posts.append((number, prompt))
                if prompt == "hang-up" and self.hangs_up:
                    writer.close()
                    return
                if prompt == "json":
                    answer = b'{"choices":[{"text":"x"}]}'
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                                 % (len(answer), answer))
                    continue
                writer.write(SSE_HEAD + chunk(b"data: %d\n\n" % len(self.posts)))
                if prompt == "lost":
                    writer.close()
                    return
                if prompt == "long":
                    await self.go_on.wait()
                writer.write(chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            self.num_post_connections_closed += posted


@contextlib.asynccontextmanager
async def routing(num_replicas: int = 1, policy: str = "predicted-ttft"):
    """(front server, its port, the replicas, the router) for the block's length."""
    replicas = [ScriptedReplica() for _ in range(num_replicas)]
    for r in replicas:
        r.server = await asyncio.start_server(r.handle, "127.0.0.1", 0)
    router = Router([r.url for r in replicas], policy, health_interval_s=30.0)
    app = RouterApp(router)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    server = FrontServer(app, 100_000, keep_alive_s=5.0, shutdown_s=2.0, forward=app)
    started = asyncio.Event()
    task = asyncio.create_task(server.serve([sock], started.set))
    await started.wait()
    try:
        yield server, sock.getsockname()[1], replicas, router
    finally:
        server.stop()
        await asyncio.wait_for(task, 5)
        for r in replicas:
            r.server.close()


def post(prompt: str, path: bytes = b"/v1/completions") -> bytes:
    body = orjson.dumps({"model": "m", "prompt": prompt, "stream": True})
    return b"POST %s HTTP/1.1\r\nhost: r\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
        path, len(body), body)


async def read_response(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2)
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return head, await asyncio.wait_for(reader.readexactly(int(line.split(b":")[1])), 2)
    return head, await asyncio.wait_for(reader.readuntil(b"\r\n0\r\n\r\n"), 2)


def events(body: bytes) -> list[bytes]:
    """The SSE events' data in a chunked body, whatever chunks carried them."""
    return re.findall(rb"data: ([^\n]*)\n\n", body)


async def connect_warm(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A client connection whose first request (its prompt "warm", a stream) has left a kept-alive
    replica connection behind: the next POST can go all the way from callbacks."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(post("warm"))
    assert events((await read_response(reader))[1])[0] == b"1"
    return reader, writer


async def until(predicate, timeout_s: float = 2.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.005)


async def test_streams_go_without_a_task_on_one_kept_replica_connection_and_pipelined_in_order() -> None:
    async with routing() as (server, port, (replica,), router):
        reader, writer = await connect_warm(port)
        writer.write(post("long"))
        head = await asyncio.wait_for(reader.readuntil(b"data: 2\n\n\r\n"), 2)
        assert head.startswith(b"HTTP/1.1 200 OK\r\n") and b"text/event-stream" in head
        assert not server.tasks  # the stream is written from callbacks: no task holds the request
        replica.go_on.set()
        assert (await asyncio.wait_for(reader.readuntil(b"0\r\n\r\n"), 2)).endswith(chunk(b"data: [DONE]\n\n")
                                                                                   + b"0\r\n\r\n")
        writer.write(post("one") + post("two", b"/v1/chat/completions"))  # two in one write
        (_, first), (_, second) = await read_response(reader), await read_response(reader)
        assert events(first)[0] == b"3" and events(second)[0] == b"4"
        assert [n for n, _ in replica.posts] == [replica.posts[0][0]] * 4  # one replica connection for all
        assert router.replicas[0].load.num_in_flight == 0 and not router.replicas[0].busy
        writer.close()


async def test_a_whole_answer_goes_on_in_the_task_with_its_length() -> None:
    async with routing() as (_, port, _replicas, router):
        reader, writer = await connect_warm(port)
        writer.write(post("json"))  # sent from the callback, its head declined there: read by a task
        head, body = await read_response(reader)
        assert head.startswith(b"HTTP/1.1 200 OK\r\n") and b"content-length: %d\r\n" % len(body) in head
        assert orjson.loads(body) == {"choices": [{"text": "x"}]}
        writer.write(post("again"))
        assert events((await read_response(reader))[1])[0] == b"3"
        assert router.replicas[0].load.num_in_flight == 0
        writer.close()


async def test_a_replica_that_hangs_up_before_its_head_is_taken_out_and_another_answers() -> None:
    async with routing(2, "round-robin") as (_, port, replicas, router):
        replicas[1].hangs_up = True
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(2):  # round-robin: the second replica, then the first; their connections are kept
            writer.write(post("json"))
            await read_response(reader)
        writer.write(post("hang-up"))  # to the second replica's kept connection, which it closes
        head, body = await read_response(reader)
        assert head.startswith(b"HTTP/1.1 200 ") and events(body) == [b"2", b"[DONE]"]  # the first replica's
        assert [p for _, p in replicas[1].posts] == ["json", "hang-up"]
        assert router.replicas[1].state == "down" and router.replicas[0].state == "ready"
        assert all(r.load.num_in_flight == 0 for r in router.replicas)
        writer.close()


async def test_a_client_gone_mid_stream_closes_its_replica_connection() -> None:
    async with routing() as (server, port, (replica,), router):
        reader, writer = await connect_warm(port)
        writer.write(post("long"))
        await asyncio.wait_for(reader.readuntil(b"data: 2\n\n"), 2)
        writer.close()
        r = router.replicas[0]
        await until(lambda: r.load.num_in_flight == 0 and not r.busy and not server.connections)
        assert not r.idle  # closed, not kept
        replica.go_on.set()  # the replica writes on, then reads: its connection was closed
        await until(lambda: replica.num_post_connections_closed == 1)


async def test_a_replica_lost_mid_stream_ends_it_with_an_error_event() -> None:
    async with routing() as (_, port, _replicas, router):
        reader, writer = await connect_warm(port)
        writer.write(post("lost"))
        _, body = await read_response(reader)
        got = events(body)
        assert got[0] == b"2" and got[-1] == b"[DONE]"
        error = orjson.loads(got[-2])["error"]
        assert error["code"] == "replica_lost"
        assert router.replicas[0].state == "down" and router.replicas[0].load.num_in_flight == 0
        writer.close()


async def test_a_stop_lets_a_forwarded_stream_finish() -> None:
    async with routing() as (server, port, (replica,), _router):
        reader, writer = await connect_warm(port)
        writer.write(post("long"))
        await asyncio.wait_for(reader.readuntil(b"data: 2\n\n"), 2)
        assert not server.tasks
        server.stop()
        await asyncio.sleep(0.1)
        assert server.connections  # still held: its stream is in flight
        replica.go_on.set()
        rest = await asyncio.wait_for(reader.read(65536), 2)
        if not rest.endswith(b"0\r\n\r\n"):
            rest += await asyncio.wait_for(reader.readuntil(b"0\r\n\r\n"), 2)
        assert b"data: [DONE]" in rest
        assert await asyncio.wait_for(reader.read(1), 2) == b""  # then closed
        writer.close()


async def test_a_head_request_ends_at_the_replicas_head_and_the_connection_goes_on() -> None:
    async with routing() as (_, port, _replicas, router):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"HEAD /v1/models HTTP/1.1\r\nhost: r\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2)
        assert head.startswith(b"HTTP/1.1 200 OK\r\n") and b"content-length: 42\r\n" in head
        assert b"chunked" not in head
        writer.write(post("after"))  # no body came after the head: the next answer is next
        assert events((await read_response(reader))[1])[0] == b"1"
        assert router.replicas[0].load.num_in_flight == 0
        writer.close()
