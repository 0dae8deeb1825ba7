"""Slow clients: a body that trickles in gets 408 after --body-read-timeout-s (the server is not
held hostage), and requests past --max-connections are refused with our JSON 503 at once."""
from __future__ import annotations

import socket
import time

import httpx


def test_trickling_body_gets_408_and_the_server_keeps_serving(launch):
    server = launch("--model", "dummy:tiny", "--num-kv-blocks", "256", "--body-read-timeout-s", "1")
    port = int(server.base_url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{\"prompt\": ")
        t0 = time.monotonic()
        reply = sock.recv(4096)
        waited = time.monotonic() - t0
        while b"\r\n\r\n" in reply and not reply.split(b"\r\n\r\n", 1)[1]:
            more = sock.recv(4096)  # the body may come in a second segment
            if not more:
                break
            reply += more
    assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
    assert b'"code":"request_timeout"' in reply
    assert 0.8 < waited < 5
    ok = httpx.post(server.base_url + "/v1/completions", json={"prompt": "hi", "max_tokens": 2}, timeout=30)
    assert ok.status_code == 200


def test_connections_past_the_cap_get_503(launch):
    server = launch("--model", "dummy:tiny", "--num-kv-blocks", "256", "--max-connections", "2")
    port = int(server.base_url.rsplit(":", 1)[1])
    idle = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(2)]
    try:
        for s in idle:  # each holds a request open: its body never comes
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{")
        time.sleep(0.3)
        r = httpx.get(server.base_url + "/v1/models", timeout=10)
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        assert r.json()["error"]["code"] == "overloaded"
        assert httpx.get(server.base_url + "/health", timeout=10).status_code == 200  # probes pass
    finally:
        for s in idle:
            s.close()
