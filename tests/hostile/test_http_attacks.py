"""Attacks on HTTP connections (issue 42): silent and trickling sockets, idle keep-alive, a flood of
silent sockets past the connection cap, oversized heads, a pipelining client that leaves, and
HTTP/1.0 framing. Each on raw sockets against a real `ttft serve`, with short timeouts set by flag;
what the server must do is RELIABILITY.md's "Security": close a silent socket within seconds,
answer 431 / 414 in our error shape before reading further, keep /health and /live answering."""
from __future__ import annotations

import selectors
import socket
import time
from urllib.parse import urlsplit

import orjson
import pytest

HEADER_TIMEOUT_S = 1.0
KEEP_ALIVE_S = 1.0
MARGIN_S = 2.0  # a loaded 2-core machine; a server that never closes would take forever
TINY = ("--model", "dummy:tiny", "--max-model-len", "512", "--num-kv-blocks", "256")
COMPLETION = orjson.dumps({"model": "dummy:tiny", "prompt": "hello", "max_tokens": 4, "ignore_eos": True})


@pytest.fixture(scope="module")
def servers(launch):
    quick = (*TINY, "--header-read-timeout-s", str(HEADER_TIMEOUT_S), "--keep-alive-timeout-s", str(KEEP_ALIVE_S))
    capped = (*TINY, "--max-connections", "64")  # a cap of 2 * 64 + 16 = 144 connections
    return launch.many([(quick, None), (capped, None)])


@pytest.fixture(scope="module")
def quick(servers):
    return servers[0]


@pytest.fixture(scope="module")
def capped(servers):
    return servers[1]


def port_of(server) -> int:
    return urlsplit(server.base_url).port


def connect(server) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port_of(server)), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def read_until_closed(sock: socket.socket, timeout_s: float = 10.0) -> bytes:
    sock.settimeout(timeout_s)
    parts = []
    try:
        while part := sock.recv(65536):
            parts.append(part)
    except ConnectionResetError:
        pass
    return b"".join(parts)


def request(method: str, path: str, body: bytes = b"", version: str = "1.1", close: bool = True) -> bytes:
    head = f"{method} {path} HTTP/{version}\r\nHost: ttft\r\n"
    if body:
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    if close and version == "1.1":
        head += "Connection: close\r\n"
    return head.encode() + b"\r\n" + body


def parse(response: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = response.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v for k, v in (line.split(": ", 1) for line in lines)}
    return int(status_line.split()[1]), headers, body


def answer(server, path: str, method: str = "GET", body: bytes = b"") -> tuple[int, dict[str, str], bytes]:
    with connect(server) as sock:
        sock.sendall(request(method, path, body))
        return parse(read_until_closed(sock))


def wait_all_closed(socks: list[socket.socket], deadline_s: float) -> float:
    """Seconds until the server closed every socket (reading EOF or a reset on each); fails past the deadline."""
    start = time.monotonic()
    sel = selectors.DefaultSelector()
    for sock in socks:
        sock.setblocking(False)
        sel.register(sock, selectors.EVENT_READ)
    open_ = set(socks)
    while open_:
        left = start + deadline_s - time.monotonic()
        assert left > 0, f"{len(open_)} of {len(socks)} sockets still open after {deadline_s} s"
        for key, _ in sel.select(left):
            try:
                data = key.fileobj.recv(65536)
            except ConnectionResetError:
                data = b""
            assert data == b"", data[:200]  # closed without an answer: it never sent a request
            sel.unregister(key.fileobj)
            open_.discard(key.fileobj)
    return time.monotonic() - start


def test_a_socket_that_sends_nothing_is_closed_at_the_header_timeout(quick) -> None:
    with connect(quick) as sock:
        took_s = wait_all_closed([sock], HEADER_TIMEOUT_S + MARGIN_S)
    assert took_s >= HEADER_TIMEOUT_S * 0.8, took_s


def test_300_connections_with_half_sent_headers_are_all_closed_at_the_header_timeout(quick) -> None:
    socks = [connect(quick) for _ in range(300)]
    for sock in socks:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: ttft\r\nContent-Le")
    try:
        took_s = wait_all_closed(socks, HEADER_TIMEOUT_S + MARGIN_S)
    finally:
        for sock in socks:
            sock.close()
    assert took_s >= HEADER_TIMEOUT_S * 0.5, took_s
    assert answer(quick, "/v1/completions", "POST", COMPLETION)[0] == 200


def test_a_header_trickled_a_line_at_a_time_is_closed_at_the_header_timeout(quick) -> None:
    with connect(quick) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\n")
        start = time.monotonic()
        try:
            while time.monotonic() - start < HEADER_TIMEOUT_S + MARGIN_S:
                sock.sendall(b"X-Trickle: 1\r\n")
                time.sleep(0.1)
        except (BrokenPipeError, ConnectionResetError):
            pass
        took_s = time.monotonic() - start
    assert took_s < HEADER_TIMEOUT_S + MARGIN_S, "never closed"


def test_an_idle_keep_alive_connection_is_closed_at_the_keep_alive_timeout(quick) -> None:
    with connect(quick) as sock:
        sock.sendall(request("GET", "/health", close=False))
        sock.settimeout(10)
        first = b""
        while b'"ready"}' not in first:
            first += sock.recv(65536)
        assert first.startswith(b"HTTP/1.1 200")
        took_s = wait_all_closed([sock], KEEP_ALIVE_S + MARGIN_S)
    assert took_s >= KEEP_ALIVE_S * 0.8, took_s


def test_200_silent_sockets_past_the_cap_leave_health_and_live_answering(capped) -> None:
    silent = [connect(capped) for _ in range(200)]  # past the 144-connection cap
    try:
        time.sleep(0.3)  # all accepted
        for probe in ("/health", "/live"):
            start = time.monotonic()
            status, _, body = answer(capped, probe)
            assert status == 200 and time.monotonic() - start < 2.0, (probe, body)
        status, headers, body = answer(capped, "/v1/completions", "POST", COMPLETION)
        error = orjson.loads(body)["error"]
        assert status == 503 and headers["retry-after"] == "1" and headers["content-type"] == "application/json"
        assert error["type"] == "overloaded_error" and error["code"] == "overloaded"
    finally:
        for sock in silent:
            sock.close()
    deadline = time.monotonic() + 5
    while answer(capped, "/v1/completions", "POST", COMPLETION)[0] != 200:  # the closes reach the server
        assert time.monotonic() < deadline
        time.sleep(0.1)


@pytest.mark.parametrize("head,status,code", [
    (b"GET /health HTTP/1.1\r\nHost: ttft\r\nX-Big: " + b"b" * (1 << 20) + b"\r\n\r\n", 431,
     "request_header_fields_too_large"),
    (b"GET /health HTTP/1.1\r\n" + b"X-Many: m\r\n" * 100_000 + b"\r\n", 431, "request_header_fields_too_large"),
    (b"GET /health?" + b"q" * 100_000 + b" HTTP/1.1\r\nHost: ttft\r\n\r\n", 414, "uri_too_long"),
])
def test_oversized_heads_get_431_or_414_in_our_error_shape(quick, head: bytes, status: int, code: str) -> None:
    with connect(quick) as sock:
        sock.sendall(head)
        got, headers, body = parse(read_until_closed(sock))
    error = orjson.loads(body)["error"]
    assert got == status and error["code"] == code and error["type"] == "invalid_request_error", body
    assert headers["connection"] == "close" and headers["content-type"] == "application/json"
    assert "Traceback" not in quick.log()


@pytest.mark.parametrize("start", [b"GET /health HTTP/1.1\r\nHost: ttft\r\nX-Huge: ", b"GET /health?q="])
def test_an_endless_header_or_query_is_cut_off_and_health_keeps_answering(quick, start: bytes) -> None:
    """120 MiB of one header value (or of a query string) is never read whole."""
    sent = 0
    with connect(quick) as sock:
        sock.settimeout(5)
        sock.sendall(start)
        chunk = b"h" * 65536
        try:
            while sent < 120 * 1024 * 1024:
                sock.sendall(chunk)
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError, socket.timeout):
            pass
    assert sent < 16 * 1024 * 1024, f"the server read {sent} bytes of one head"
    start_s = time.monotonic()
    assert answer(quick, "/health")[0] == 200 and time.monotonic() - start_s < 2.0


def test_20_pipelined_posts_then_a_close_log_no_traceback(quick) -> None:
    with connect(quick) as sock:
        sock.sendall(request("POST", "/v1/completions", COMPLETION, close=False) * 20)
    time.sleep(1.5)  # what was started finishes or is aborted
    assert answer(quick, "/v1/completions", "POST", COMPLETION)[0] == 200
    log = quick.log()
    assert "Traceback" not in log and "unhandled error" not in log, log[-3000:]


def test_http10_stream_is_close_delimited_and_a_whole_reply_has_its_length(quick) -> None:
    stream = orjson.dumps({"model": "dummy:tiny", "prompt": "hello", "max_tokens": 4, "stream": True})
    with connect(quick) as sock:
        sock.sendall(request("POST", "/v1/completions", stream, version="1.0"))
        status, headers, body = parse(read_until_closed(sock))
    assert status == 200 and "transfer-encoding" not in headers and headers["connection"] == "close"
    assert headers["content-type"].startswith("text/event-stream")
    events = [line for line in body.split(b"\n\n") if line]
    assert events[-1] == b"data: [DONE]" and all(e.startswith(b"data: {") for e in events[:-1]), body[:500]
    with connect(quick) as sock:
        sock.sendall(request("POST", "/v1/completions", COMPLETION, version="1.0"))
        status, headers, body = parse(read_until_closed(sock))
    assert status == 200 and "transfer-encoding" not in headers and int(headers["content-length"]) == len(body)
    assert orjson.loads(body)["usage"]["completion_tokens"] == 4
