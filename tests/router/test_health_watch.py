"""HealthWatch.apply: what each answer of a replica does to its state and published load."""
from __future__ import annotations

import orjson

from router.health_watch import HealthWatch
from router.replica import DOWN, DRAINING, READY, Replica


def test_ready_records_the_published_load() -> None:
    r = Replica("http://127.0.0.1:1")
    HealthWatch.apply(r, 200, orjson.dumps({"status": "ready", "num_waiting": 3, "num_running": 2,
                                            "num_queued_prefill_tokens": 700, "prefill_tokens_per_s": 5000}))
    assert r.state == READY and (r.load.num_waiting, r.load.num_running) == (3, 2)
    assert r.load.num_queued_prefill_tokens == 700
    assert r.load.prefill_tokens_per_s == 5000.0
    HealthWatch.apply(r, 200, orjson.dumps({"status": "ready"}))  # /health: no load, the last one stays
    assert r.state == READY and r.load.num_waiting == 3


def test_draining_stopped_broken_and_garbage() -> None:
    r = Replica("http://127.0.0.1:1")
    HealthWatch.apply(r, 503, orjson.dumps({"status": "draining"}))
    assert r.state == DRAINING
    HealthWatch.apply(r, 503, orjson.dumps({"status": "stopped"}))
    assert r.state == DRAINING
    HealthWatch.apply(r, 503, orjson.dumps({"status": "broken", "reason": "step failed"}))
    assert r.state == DOWN and "broken" in r.reason
    HealthWatch.apply(r, 200, b"not json")
    assert r.state == READY
    HealthWatch.apply(r, 500, b"[1]")
    assert r.state == DOWN


async def _replica_server(answers: dict[bytes, bytes]):
    """A scripted replica: each request's path picks its whole response; unknown paths get none."""
    import asyncio

    async def script(reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                path = head.split(b" ", 2)[1]
                if path not in answers:
                    await asyncio.sleep(3600)  # accepts, never answers
                writer.write(answers[path])
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(script, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


def _response(status: bytes, body: bytes) -> bytes:
    return b"HTTP/1.1 " + status + b"\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body


async def test_a_replica_without_the_state_route_is_asked_health() -> None:
    server, url = await _replica_server({b"/replica/state": _response(b"404 Not Found", b"{}"),
                                         b"/health": _response(b"200 OK", b'{"status":"ready"}')})
    replica = Replica(url)
    watch = HealthWatch([replica], interval_s=0.05, timeout_s=1.0)
    await watch.check_all()
    assert replica.state == READY
    await watch.check_all()  # straight to /health from now on, on the kept connection
    assert replica.state == READY
    await watch.stop()
    server.close()


async def _keyed_replica(key: bytes):
    """A scripted replica whose state route answers 401 unless the request carries `key`."""
    import asyncio

    async def script(reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                ok = b"\r\nauthorization: Bearer " + key + b"\r\n" in head
                writer.write(_response(b"200 OK", b'{"status":"ready","num_waiting":4}') if ok
                             else _response(b"401 Unauthorized", b"{}"))
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(script, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def test_the_key_is_sent_and_a_401_is_down_with_a_reason_that_names_the_key() -> None:
    server, url = await _keyed_replica(b"sesame")
    cases = [(None, DOWN, "wants an API key the router was not given"),
             ("wrong", DOWN, "refused the router's API key"), ("sesame", READY, "")]
    for key, state, reason in cases:
        replica = Replica(url)
        watch = HealthWatch([replica], interval_s=0.05, timeout_s=1.0, api_key=key)
        await watch.check_all()
        assert replica.state == state and reason in replica.reason
        if state == DOWN:
            assert "--replica-api-key" in replica.reason and "sesame" not in replica.reason
        else:
            assert replica.load.num_waiting == 4  # the state route itself answered, not /health
        await watch.stop()
    server.close()


async def test_a_silent_replica_is_down_after_the_timeout_and_a_refusing_one_at_once() -> None:
    import time

    server, url = await _replica_server({})
    replica = Replica(url)
    replica.state = READY
    watch = HealthWatch([replica], interval_s=0.05, timeout_s=0.3)
    t0 = time.monotonic()
    await watch.check_all()
    assert replica.state == DOWN and replica.reason == "health check timed out"
    assert 0.25 < time.monotonic() - t0 < 1.0
    server.close()
    await server.wait_closed()
    closed = Replica(url)
    await HealthWatch([closed], timeout_s=0.3).check_all()
    assert closed.state == DOWN and "cannot connect" in closed.reason


def test_down_by_timeout_ends_only_the_streams_that_stopped_moving() -> None:
    import time

    class Conn:
        def __init__(self, silent_s: float) -> None:
            self.active_at, self.closed = time.monotonic() - silent_s, False

        def close(self) -> None:
            self.closed = True

    r = Replica("http://127.0.0.1:1")
    moving, stuck, idle = Conn(0.1), Conn(2.0), Conn(0.0)
    r.busy, r.idle = {moving, stuck}, [idle]
    r.set_state(DOWN, "health check timed out", silent_for_s=0.5)
    assert stuck.closed and idle.closed and not moving.closed and r.idle == []
    r.set_state(DOWN, "cannot connect")  # refused: everything ends
    assert moving.closed
