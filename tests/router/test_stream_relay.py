"""StreamRelay between a scripted replica and a recording client transport: a stream's head and first
part reach the client from the replica connection's callback with no task reading them, the first
token is booked, its end is a callback, what is not a stream (or a connection lost before its head)
is declined once to the task, a stream lost part-way says why, and a full client buffer pauses the
reading from the replica."""
from __future__ import annotations

import asyncio

import pytest

from router.client_channel import ClientChannel
from router.core import Router
from router.replica import READY
from router.request_key import RoutedRequest
from router.stream_relay import StreamRelay
from router.upstream import UpstreamConnection, UpstreamError

SSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


class Recorder:
    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(data)


async def relayed(script):
    """(server, relay, conn, client writes, dispatch, finished, declined) for one request sent to a
    replica running `script`: `finished` resolves to what the relay's end callback was given,
    `declined` records its declines."""
    server = await asyncio.start_server(script, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    router = Router([url])
    router.replicas[0].state = READY
    d = router.dispatch(RoutedRequest((), 100))
    out = Recorder()
    channel = ClientChannel(out, "1.1", False, keep_alive=True)
    conn = await UpstreamConnection.open(router.replicas[0].host, router.replicas[0].port, 1.0)
    finished = asyncio.get_running_loop().create_future()
    declined: list[bool] = []
    relay = StreamRelay(channel, router, d, conn, finished.set_result, lambda: declined.append(True))
    conn.send(b"POST", b"/v1/completions", b"h", [], b"{}", relay)
    return server, relay, conn, out, d, finished, declined


async def until(predicate, timeout_s: float = 2.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.005)


async def test_the_first_part_reaches_the_client_from_the_callback_and_the_end_resolves_finished() -> None:
    go_on = asyncio.Event()

    async def script(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(2)
        writer.write(SSE_HEAD + b"5\r\nfirst\r\n")
        await go_on.wait()
        writer.write(b"4\r\nlast\r\n0\r\n\r\n")

    server, relay, conn, out, d, finished, _ = await relayed(script)
    await until(lambda: out.writes)  # nobody awaits read_head nor the body: the callback wrote it
    assert out.writes == [b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked"
                          b"\r\n\r\n5\r\nfirst\r\n"]
    assert relay.taken and d.started and not finished.done()
    assert d.replica.load.num_pending_prefill_tokens == 0  # the first token took the prefill off the books
    go_on.set()
    assert await asyncio.wait_for(finished, 2) is None
    assert out.writes[1:] == [b"4\r\nlast\r\n0\r\n\r\n"] and conn.reusable
    assert await conn.read_head() == (200, [(b"content-type", b"text/event-stream")])
    conn.close()
    server.close()


@pytest.mark.parametrize("reply", [
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}",
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/event-stream\r\ncontent-length: 2\r\n\r\n{}",
])
async def test_what_is_not_a_stream_or_is_a_503_is_left_to_the_task(reply: bytes) -> None:
    async def script(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(reply)

    server, relay, conn, out, _, finished, declined = await relayed(script)
    await conn.read_head()
    assert b"".join([c async for c in conn.body_chunks()]) == b"{}"
    assert not relay.taken and out.writes == [] and not finished.done() and declined == [True]
    conn.close()  # a loss after the decline is the reader's to see: not told again
    await asyncio.sleep(0.01)
    assert declined == [True] and not finished.done()
    server.close()


async def test_a_connection_lost_before_any_head_is_declined_not_ended() -> None:
    async def script(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.close()

    server, relay, conn, out, _, finished, declined = await relayed(script)
    await until(lambda: declined)
    assert declined == [True] and not finished.done() and out.writes == []
    with pytest.raises(UpstreamError):
        await conn.read_head()
    server.close()


async def test_a_stream_lost_part_way_passes_on_what_came_then_says_why() -> None:
    async def script(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(SSE_HEAD + b"5\r\nfirst\r\nzz\r\n")  # then a chunk size that is not hex
        writer.close()

    server, relay, conn, out, _, finished, declined = await relayed(script)
    why = await asyncio.wait_for(finished, 2)
    assert "not HTTP/1.1" in why
    assert out.writes and out.writes[0].endswith(b"5\r\nfirst\r\n")
    assert not conn.reusable
    server.close()


async def test_a_full_client_buffer_pauses_the_replica_connection_until_it_drains() -> None:
    go_on = asyncio.Event()

    async def script(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(SSE_HEAD + b"5\r\nfirst\r\n")
        await go_on.wait()
        writer.write(b"0\r\n\r\n")

    server, relay, conn, out, _, finished, declined = await relayed(script)
    await until(lambda: out.writes)
    relay.channel.pause()
    assert not conn.transport.is_reading()
    relay.channel.resume()
    assert conn.transport.is_reading()
    go_on.set()
    await asyncio.wait_for(finished, 2)
    relay.channel.pause()  # a pause after the end must not stall the connection's next response
    assert conn.transport.is_reading()
    conn.close()
    server.close()
