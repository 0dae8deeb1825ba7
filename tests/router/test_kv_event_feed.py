"""The replicas' block events in the router: KvEventFeed applies stored / removed / all_cleared to
the PrefixIndex and asks from where it left off; a body it cannot read changes nothing. Then two
scripted replicas behind HealthWatch: the one whose events say it holds a conversation's prefix
gets its next turn (the router never sent it that prefix), unless its published queue makes it the
slower one; once it evicts the prefix it has no claim left; a replica without the route is not
asked again, and one that never answers the events route stays ready and costs one timeout."""
from __future__ import annotations

import asyncio

import orjson

from router.core import Router
from router.kv_event_feed import KvEventFeed
from router.prefix_index import PrefixIndex
from router.replica import READY
from router.request_key import routed_request

H = [bytes([k]) * 16 for k in range(6)]


def answer(epoch: str, seq: int, *events: tuple[int, str, list[bytes]]) -> bytes:
    lines = [orjson.dumps({"type": "log", "epoch": epoch, "seq": seq})]
    lines += [orjson.dumps({"seq": s, "type": kind, "block_hashes": [h.hex() for h in hashes]})
              for s, kind, hashes in events]
    return b"\n".join(lines) + b"\n"


def test_events_move_the_index_and_the_place() -> None:
    index = PrefixIndex()
    feed = KvEventFeed(index)
    assert feed.path(0) == b"/replica/kv_events?epoch=&after=0"
    feed.apply(0, answer("e1", 0, (0, "all_cleared", []), (0, "stored", H[:2])))
    feed.apply(0, answer("e1", 2, (1, "stored", H[2:4]), (2, "removed", [H[1]])))
    assert index.num_cached_blocks(0, H) == 1 and feed.path(0) == b"/replica/kv_events?epoch=e1&after=2"
    for garbage in (b"", b"not json\n", b'{"type":"log"}\n', b'{"type":"log","epoch":"e1","seq":3}\n{"type":"stored","block_hashes":["zz"]}\n',
                    b"[1]\n"):
        feed.apply(0, garbage)
        assert feed.path(0).endswith(b"after=2") and index.num_cached_blocks(0, H) == 1
    index.record(0, H[:3])  # the router's own guess, as at a dispatch
    feed.apply(0, answer("e2", 0, (0, "all_cleared", []), (0, "stored", [H[0]])))  # a restarted replica
    assert index.num_cached_blocks(0, H) == 1 and feed.num_events == 6


class ScriptedReplica:
    """/replica/state and /replica/kv_events (its query ignored) from mutable answers."""

    def __init__(self) -> None:
        self.state = {"status": "ready", "num_waiting": 0, "num_running": 0, "num_queued_prefill_tokens": 0}
        self.events = answer("ep", 0)
        self.num_event_asks = 0

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader, writer) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                path = head.split(b" ", 2)[1].split(b"?")[0]
                if path == b"/replica/kv_events":
                    self.num_event_asks += 1
                    if self.events == b"hang":
                        await asyncio.sleep(3600)
                    body, status = (self.events, b"200 OK") if self.events else (b"{}", b"404 Not Found")
                else:
                    body, status = orjson.dumps(self.state), b"200 OK"
                writer.write(b"HTTP/1.1 " + status + b"\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


async def test_the_replica_holding_the_prefix_wins_unless_it_is_busy() -> None:
    a, b = ScriptedReplica(), ScriptedReplica()
    router = Router([await a.start(), await b.start()], "predicted-ttft", health_timeout_s=1.0)
    system = "You are a careful assistant. " * 40
    first = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": "hi"}]}
    second = {"messages": [*first["messages"], {"role": "assistant", "content": "hello"},
                           {"role": "user", "content": "and then?"}]}
    held = list(routed_request(orjson.dumps(first)).block_hashes)
    assert len(held) >= 10
    a.events = answer("ep", 1, (0, "all_cleared", []), (1, "stored", held))  # served by someone else
    await router.health.check_all()
    assert all(r.state == READY for r in router.replicas)
    turn = routed_request(orjson.dumps(second))
    for _ in range(4):  # every time, whatever the rotation: A holds the prefix
        d = router.dispatch(turn)
        assert d.replica_index == 0
        router.finish(d)
    # A busy: a queue whose prefill costs more than B recomputing the whole prompt
    a.state["num_queued_prefill_tokens"] = 50_000
    await router.health.check_all()
    d = router.dispatch(turn)
    assert d.replica_index == 1
    router.finish(d)
    # A idle again but it evicted the prefix: its claim is gone (and the router's guess of B's stays)
    a.state["num_queued_prefill_tokens"] = 0
    a.events = answer("ep", 2, (2, "removed", held[:1]))
    await router.health.check_all()
    assert router.index.num_cached_blocks(0, turn.block_hashes) == 0
    d = router.dispatch(turn)
    assert d.replica_index == 1  # B has it now, from the turn the router sent there
    router.finish(d)
    # a replica without the route is asked once
    b.events = b""
    await router.health.check_all()
    await router.health.check_all()
    assert b.num_event_asks == 4 and router.replicas[1].state == READY
    await router.health.stop()
    a.server.close()
    b.server.close()



async def test_a_replica_silent_on_events_stays_ready_and_the_check_ends_at_its_timeout() -> None:
    import time

    a = ScriptedReplica()
    a.events = b"hang"
    router = Router([await a.start()], "predicted-ttft", health_timeout_s=0.3)
    t0 = time.monotonic()
    await router.health.check_all()
    assert router.replicas[0].state == READY and time.monotonic() - t0 < 1.0
    a.events = answer("ep", 1, (0, "all_cleared", []), (1, "stored", H[:2]))
    await router.health.check_all()  # a new connection: the hung one was dropped
    assert router.replicas[0].state == READY and router.index.num_cached_blocks(0, H) == 2
    await router.health.stop()
    a.server.close()


def test_an_offloaded_prefix_is_still_held_and_costs_a_restore_not_a_recompute() -> None:
    from router.replica import Replica
    from router.ttft_predictor import TtftPredictor

    index = PrefixIndex()
    feed = KvEventFeed(index)
    feed.apply(0, answer("e", 1, (1, "stored", H)))
    feed.apply(1, answer("f", 2, (1, "stored", H), (2, "offloaded", H[2:])))  # its device kept H[:2]
    assert [index.num_cached_blocks(r, H) for r in (0, 1)] == [6, 6]
    assert [index.num_host_blocks(r, H, 6) for r in (0, 1)] == [0, 4]
    predictor, replica = TtftPredictor(), Replica("http://127.0.0.1:1")
    on_device, on_host = (predictor.predict_s(replica, 200, 6, index.num_host_blocks(r, H, 6)) for r in (0, 1))
    recompute = predictor.predict_s(replica, 200, 0)
    assert on_device < on_host < recompute
    feed.apply(1, answer("f", 3, (3, "stored", H[2:3])))  # fetched back to the device
    assert index.num_host_blocks(1, H, 6) == 3
    feed.apply(1, answer("f", 4, (4, "removed", H[4:])))  # the host tier dropped the last two
    assert index.num_cached_blocks(1, H) == 4 and index.num_host_blocks(1, H, 4) == 1
    index.forget(1)  # the replica went down: nothing of it is held, on any tier
    assert index.num_cached_blocks(1, H) == 0 and index.num_host_blocks(1, H, 6) == 0
