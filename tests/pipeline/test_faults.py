"""Faults, injected through the test-only TTFT_FAULT_INJECT hook (pipeline/faults.py).

A failing model step breaks the engine: every in-flight stream gets an SSE error event then
`data: [DONE]`, new requests get 503 (or find the listener already closed), /health stops saying
200, and the process exits non-zero so a supervisor restarts it. A failure confined to one
request fails that request only; the server stays healthy.
"""
from __future__ import annotations

import asyncio
import time

import orjson
import pytest

from reliability_kit import TINY, finish_reason, post, probe, stream_error

FAIL_AFTER_STEPS = 100  # enough that all 4 streams are admitted and streaming first


@pytest.fixture(scope="module")
def servers(launch):
    broken, picky = launch.many([
        (TINY, {"TTFT_FAULT_INJECT": orjson.dumps({"fail_step_after": FAIL_AFTER_STEPS}).decode()}),
        (TINY, {"TTFT_FAULT_INJECT": orjson.dumps({"fail_request_id_prefix": "bad-"}).decode()}),
    ])
    return {"broken": broken, "picky": picky}


async def test_a_failing_model_step_fails_everything_and_exits_non_zero(servers):
    server = servers["broken"]
    body = {"prompt": "go", "max_tokens": 500, "temperature": 0, "ignore_eos": True, "stream": True}
    replies = await asyncio.gather(*(post(server, "/v1/completions", body, timeout_s=20) for _ in range(4)))
    failed_at = time.monotonic()
    for r in replies:
        assert r.status == 200 and not r.timed_out, (r.status, r.error, r.body[-300:])
        assert r.done and r.events[-2].startswith(b'{"error"'), r.events[-3:]  # error event, then [DONE]
        err = stream_error(r)
        assert err["type"] == "server_error" and "injected failure" in err["message"], err
        assert finish_reason(r) is None  # the tokens before the error, none of them final
    # After the failure: nothing is served again, and the process goes away with status 1.
    after = await post(server, "/v1/completions", {"prompt": "hi", "max_tokens": 2}, timeout_s=5)
    assert after.status in (503, None), after.status  # None: the listener is already closed
    if after.status == 503:
        assert "retry-after" in after.headers
    health = await probe(server).health() if server.proc.poll() is None else None
    assert health in (503, None)
    code = await asyncio.to_thread(server.proc.wait, 10)
    print(f"engine failure: new request -> {after.status}, /health -> {health}, exit status {code} "
          f"{time.monotonic() - failed_at:.2f} s after the failure")
    assert code == 1
    assert "injected failure at model step" in server.log()


async def test_a_failure_of_one_request_fails_only_that_request(servers):
    server = servers["picky"]
    p = probe(server)
    good = {"prompt": "fine", "max_tokens": 30, "temperature": 0, "ignore_eos": True}
    bad_stream, bad_whole, *others = await asyncio.gather(
        post(server, "/v1/completions", {**good, "stream": True}, headers={"X-Request-Id": "bad-1"}),
        post(server, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 30},
             headers={"X-Request-Id": "bad-2"}),
        *(post(server, "/v1/completions", {**good, "stream": i % 2 == 0}, headers={"X-Request-Id": f"good-{i}"})
          for i in range(6)),
    )
    for bad in (bad_stream, bad_whole):
        if bad.status == 200:  # failed after its stream started: an error event, then [DONE]
            assert bad.done and stream_error(bad) is not None, bad.events[-3:]
        else:
            assert bad.status == 500, (bad.status, bad.body)
            err = bad.json()["error"]
            assert err["type"] == "server_error" and "injected failure for request" in err["message"], err
    assert bad_stream.headers.get("x-request-id") == "bad-1"
    print(f"one request's fault: stream -> {bad_stream.status}, whole -> {bad_whole.status}")
    for r in others:
        assert r.status == 200 and finish_reason(r) == "length", (r.status, r.body[-300:])
    assert await p.health() == 200
    idle, m = await p.wait_idle(1.0)
    assert idle, m
    ok = await post(server, "/v1/completions", good)
    assert ok.status == 200 and ok.json()["usage"]["completion_tokens"] == 30
    assert server.proc.poll() is None
