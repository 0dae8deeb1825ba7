"""Overload: bounded running and queued requests with an immediate 503 past them, deadlines, a
client that stops reading, and a 10x burst that leaves memory bounded and the server answering."""
from __future__ import annotations

import asyncio
import os
import tempfile
import time

import pytest

from bench.server_probe import rss_bytes
from reliability_kit import TINY, finish_reason, post, probe

# A: one running, one queued; a reader that stops is cut after 1 s. On a Unix socket: over TCP
# loopback the kernel grows a connection's send buffer to 4 MB (tcp_wmem), more than a dummy:tiny
# reply, so a non-reading TCP client is only ever noticed after 4 MB; a Unix socket's buffer is
# ~200 KB, and the stall path is the same.
SMALL = (*TINY, "--max-num-seqs", "1", "--max-queued", "1", "--stream-stall-timeout-s", "1",
         "--max-model-len", "2048")
# B: capacity 30 (10 running + 20 queued), a 1.2 s deadline, room for a 2,000-token reply (at the
# fastest ~1 ms a token, still past the deadline).
BURST = (*TINY, "--max-num-seqs", "10", "--max-queued", "20", "--request-timeout-s", "1.2",
         "--max-model-len", "2048")
MAX_REJECT_S = 0.5


@pytest.fixture(scope="module")
def servers(launch):
    uds = os.path.join(tempfile.mkdtemp(prefix="ttft-"), "small.sock")
    small, burst = launch.many([((*SMALL, "--uds", uds), None), (BURST, None)])
    return {"small": small, "burst": burst}


async def test_past_capacity_requests_get_an_immediate_503(servers):
    server = servers["small"]
    body = {"prompt": "count", "max_tokens": 200, "temperature": 0, "ignore_eos": True}
    replies = await asyncio.gather(*(post(server, "/v1/completions", body) for _ in range(10)))
    ok = [r for r in replies if r.status == 200]
    busy = [r for r in replies if r.status == 503]
    assert len(ok) == 2 and len(busy) == 8, [r.status for r in replies]
    for r in busy:
        assert int(r.headers["retry-after"]) >= 1
        assert r.json()["error"]["type"] and r.json()["error"]["message"]
        assert r.elapsed_s < MAX_REJECT_S, r.elapsed_s
    assert all(finish_reason(r) == "length" for r in ok)
    assert min(r.elapsed_s for r in ok) > max(r.elapsed_s for r in busy)  # rejected while they ran
    idle, m = await probe(server).wait_idle(2.0)
    assert idle, m
    assert m['ttft_requests_total{outcome="rejected_overload"}'] >= 8


async def test_a_client_that_stops_reading_is_aborted_and_freed(servers):
    """The stream fills the kernel buffers (a 4 KB receive window, 20 logprobs a token), then the
    server's bounded per-stream buffer; after --stream-stall-timeout-s the request is aborted."""
    server = servers["small"]
    p = probe(server)
    body = {"prompt": "x", "max_tokens": 2000, "temperature": 0, "ignore_eos": True, "stream": True,
            "logprobs": 20}
    holder = asyncio.create_task(post(server, "/v1/completions", body, headers={"X-Request-Id": "stall-1"},
                                      read=False, hold_s=20, recv_buffer_bytes=4096))
    t0 = time.monotonic()
    while True:
        traces = await p.traces(limit=20)
        if "stall-1" in traces:
            break
        assert time.monotonic() - t0 < 15, "the stalled stream was not aborted"
        await asyncio.sleep(0.1)
    info = traces["stall-1"]["info"]
    print(f"stalled reader: {info['finish_reason']} after {info['num_output_tokens']} tokens, "
          f"{time.monotonic() - t0:.2f} s")
    assert info["finish_reason"] == "abort" and info["num_output_tokens"] < 2000, info
    m = await p.metrics()
    assert m['ttft_kv_blocks{state="used"}'] == 0  # freed while the socket is still open
    holder.cancel()
    ok = await post(server, "/v1/completions", {"prompt": "hello", "max_tokens": 3})
    assert ok.status == 200


async def test_request_timeout_aborts_and_frees(servers):
    server = servers["burst"]
    body = {"prompt": "long", "max_tokens": 2000, "temperature": 0, "ignore_eos": True}
    streamed, whole = await asyncio.gather(
        post(server, "/v1/completions", {**body, "stream": True}),
        post(server, "/v1/completions", body),
    )
    for r in (streamed, whole):
        assert r.status == 200 and finish_reason(r) == "timeout", r.body[-300:]
        assert 1.1 < r.elapsed_s < 3.5, r.elapsed_s
    assert streamed.done
    usage = whole.json()["usage"]
    assert 0 < usage["completion_tokens"] < 2000
    idle, m = await probe(server).wait_idle(1.0)
    assert idle, m
    assert m['ttft_requests_total{outcome="timeout"}'] >= 2


async def test_a_10x_burst_keeps_memory_bounded_and_the_server_answering(servers):
    server = servers["burst"]
    p = probe(server)
    small = {"prompt": "warm", "max_tokens": 8, "temperature": 0, "ignore_eos": True}
    for _ in range(2):  # warm-up: connections, buffers and allocator pools at their working size
        await asyncio.gather(*(post(server, "/v1/completions", {**small, "stream": i % 2 == 0}) for i in range(30)))
    await p.wait_idle(2.0)
    rss_before = rss_bytes(server.proc.pid)

    async def one(i: int):
        body = {"prompt": [3 + i % 250] * (1 + i % 60), "max_tokens": 4 + i % 13, "temperature": 0,
                "ignore_eos": True, "stream": i % 2 == 0}
        return await post(server, "/v1/completions", body, timeout_s=60)

    replies = await asyncio.gather(*(one(i) for i in range(300)))
    statuses = [r.status for r in replies]
    num_ok, num_busy = statuses.count(200), statuses.count(503)
    print(f"burst of 300 on capacity 30: {num_ok} served, {num_busy} rejected with 503")
    assert num_ok + num_busy == 300, sorted(set(map(str, statuses)))
    assert num_ok >= 30 and num_busy >= 100
    assert all("retry-after" in r.headers for r in replies if r.status == 503)
    assert all(finish_reason(r) in ("length", "timeout") for r in replies if r.status == 200)
    idle, m = await p.wait_idle(3.0)
    assert idle, m
    growth = rss_bytes(server.proc.pid) - rss_before
    print(f"RSS {rss_before / 2**20:.1f} MiB, grew {growth / 2**20:.2f} MiB")
    assert growth < 32 * 2**20
    assert await p.health() == 200
    ok = await post(server, "/v1/completions", {"prompt": "after", "max_tokens": 3, "ignore_eos": True})
    assert ok.status == 200 and ok.json()["usage"]["completion_tokens"] == 3
