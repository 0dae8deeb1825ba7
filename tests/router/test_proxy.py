"""`ttft route` in front of three live `dummy:tiny` replicas and one socket that never answers:
streaming without buffering, the API passed through (a HEAD ended at its head), aborts forwarded,
and the faults of issue 48 (a replica hung, killed with -9 mid-stream, drained by SIGTERM). The
fault tests end one replica each; replica 0 is never touched, so every test has somewhere to route."""
from __future__ import annotations

import os
import signal
import time
from contextlib import contextmanager

import httpx
import orjson
import pytest

from fleet import TINY, num_active, silent_listener, start_router, stream_lines

LONG = {"model": "dummy:tiny", "prompt": "a long story", "max_tokens": 1000, "min_tokens": 1000,
        "stream": True}


@pytest.fixture(scope="module")
def fleet(launch, tmp_path_factory):
    replicas = launch.many([(TINY, None)] * 3)
    silent, silent_url = silent_listener()
    router = start_router(tmp_path_factory.mktemp("router"), [r.base_url for r in replicas] + [silent_url],
                          "--max-body-bytes", "100000")
    yield replicas, router, silent_url
    silent.close()
    assert router.stop() == 0  # SIGTERM: a clean exit within the stop's wait, not a kill


def streaming_replica(replicas, timeout_s: float = 5.0):
    """The replica (1 or 2: the tests that end one leave replica 0 alone) whose stream is in flight."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for r in replicas:
            if r.proc.poll() is None and num_active(r) > 0:
                return r
        time.sleep(0.05)
    raise AssertionError("no replica has the stream")


def test_the_silent_replica_is_down_and_requests_go_elsewhere(fleet) -> None:
    replicas, router, silent_url = fleet
    health = router.http("GET", "/health").json()
    states = {r["url"]: r for r in health["replicas"]}
    assert states[silent_url]["state"] == "down" and "timed out" in states[silent_url]["reason"]
    assert health["num_ready"] == 3
    for k in range(6):
        r = router.http("POST", "/v1/completions", json={"model": "dummy:tiny", "prompt": f"hi {k}", "max_tokens": 3})
        assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] in ("length", "stop")


def test_answers_equal_a_replica_answered_directly(fleet) -> None:
    replicas, router, _ = fleet
    body = {"model": "dummy:tiny", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8,
            "temperature": 0}
    direct = replicas[0].http("POST", "/v1/chat/completions", json=body).json()
    routed = router.http("POST", "/v1/chat/completions", json=body).json()
    assert routed["choices"] == direct["choices"]
    assert router.http("GET", "/v1/models").json()["data"][0]["id"] == "dummy:tiny"


def test_a_head_request_gets_the_replicas_head_at_once(fleet) -> None:
    replicas, router, _ = fleet
    direct = replicas[0].http("HEAD", "/v1/models")
    routed = router.http("HEAD", "/v1/models")  # not a wait for a body that never comes (10 s: a timeout)
    assert routed.status_code == direct.status_code == 200 and routed.content == b""
    assert routed.headers["content-length"] == direct.headers["content-length"] != "0"
    assert router.http("GET", "/v1/models").json()["data"][0]["id"] == "dummy:tiny"


def test_stream_chunks_arrive_while_the_replica_still_generates(fleet) -> None:
    replicas, router, _ = fleet
    with httpx.Client(timeout=30) as client:
        with client.stream("POST", f"{router.base_url}/v1/completions", json=LONG) as resp:
            assert resp.headers["content-type"].startswith("text/event-stream")
            lines = stream_lines(resp)
            first = next(lines)
            assert first.startswith("data: {")
            # the first event is here and the replica is still generating: nothing was gathered
            assert sum(num_active(r) for r in replicas) == 1
            events = [first] + list(lines)
    assert events[-1] == "data: [DONE]"
    assert orjson.loads(events[-2][6:])["choices"][0]["finish_reason"] == "length"


def test_bad_input_gets_the_replicas_400_and_a_big_body_the_routers_413(fleet) -> None:
    _, router, _ = fleet
    r = router.http("POST", "/v1/completions", content=b"{not json")
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    r = router.http("POST", "/v1/completions", json={"model": "dummy:tiny", "prompt": "", "max_tokens": 3})
    assert r.status_code == 400
    r = router.http("POST", "/v1/completions", content=b"x" * 200_000)
    assert r.status_code == 413 and "100000" in r.json()["error"]["message"]
    r = router.http("POST", "/v1/completions", json={"model": "dummy:tiny", "prompt": "ok", "max_tokens": 2})
    assert r.status_code == 200


def test_a_client_that_goes_away_has_its_request_aborted_on_the_replica(fleet) -> None:
    replicas, router, _ = fleet
    with httpx.Client(timeout=30) as client:
        with client.stream("POST", f"{router.base_url}/v1/completions", json=LONG) as resp:
            next(stream_lines(resp))
    deadline = time.monotonic() + 2
    while sum(num_active(r) for r in replicas) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sum(num_active(r) for r in replicas) == 0


@contextmanager
def long_stream(router, replicas):
    """A stream in flight on replica 1 or 2 (replica 0 is never ended): (its lines, its replica).
    One landed on replica 0 is dropped and asked again."""
    with httpx.Client(timeout=30) as client:
        for _ in range(10):
            with client.stream("POST", f"{router.base_url}/v1/completions", json=LONG) as resp:
                lines = stream_lines(resp)
                next(lines)
                victim = streaming_replica(replicas)
                if victim is not replicas[0]:
                    yield lines, victim
                    return
    raise AssertionError("every stream landed on replica 0")


def small_request_ok(router) -> bool:
    r = router.http("POST", "/v1/completions", json={"model": "dummy:tiny", "prompt": "x", "max_tokens": 2})
    return r.status_code == 200


def test_a_hung_replica_ends_its_stream_with_an_error_is_taken_out_then_back(fleet) -> None:
    replicas, router, _ = fleet
    with long_stream(router, replicas) as (lines, victim):
        os.kill(victim.proc.pid, signal.SIGSTOP)  # accepts connections, answers nothing
        try:
            t0 = time.monotonic()
            events = list(lines)
            ended_s = time.monotonic() - t0
            assert router.replica_states()[victim.base_url] == "down"
            assert small_request_ok(router)
        finally:
            os.kill(victim.proc.pid, signal.SIGCONT)
    assert ended_s < 3.5  # out at its first timed-out check; its stream, once silent half a timeout
    assert events[-1] == "data: [DONE]" and orjson.loads(events[-2][6:])["error"]["code"] == "replica_lost"
    assert router.wait_state(victim.base_url, "ready", 5) < 5


def test_kill_9_mid_stream_ends_it_with_an_error_and_routes_elsewhere(fleet) -> None:
    replicas, router, _ = fleet
    with long_stream(router, replicas) as (lines, victim):
        victim.proc.kill()
        events = list(lines)
    assert events[-1] == "data: [DONE]" and orjson.loads(events[-2][6:])["error"]["code"] == "replica_lost"
    assert router.replica_states()[victim.base_url] == "down"
    assert all(small_request_ok(router) for _ in range(4))


def test_sigterm_drains_the_replica_its_stream_finishes_and_no_request_goes_there(fleet) -> None:
    replicas, router, _ = fleet
    with long_stream(router, replicas) as (lines, victim):
        victim.proc.send_signal(signal.SIGTERM)
        router.wait_state(victim.base_url, "draining", 2)
        for _ in range(4):  # while it drains, nothing new is sent there
            assert small_request_ok(router)
            assert router.in_flight()[victim.base_url] <= 1  # its own stream only
        events = list(lines)
    assert events[-1] == "data: [DONE]"
    assert orjson.loads(events[-2][6:])["choices"][0]["finish_reason"] == "length"
    assert victim.proc.wait(20) == 0
