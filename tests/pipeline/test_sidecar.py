"""`ttft serve --uds` as a sidecar, on real servers: the socket file's mode (0600 unless --uds-mode),
a second server refused on a live path while the first keeps answering, a stale file replaced, the
file removed at exit; and the server's own lines: the access log only when asked, the stats line,
the start-up progress."""
from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

TINY = ("--model", "dummy:tiny", "--max-model-len", "256", "--num-kv-blocks", "64")
COMPLETION = {"prompt": "hello", "max_tokens": 4, "temperature": 0}


@pytest.fixture(scope="module")
def sockets_dir():
    # Short: a Unix socket's path is at most 107 bytes, and pytest's tmp paths are long.
    with tempfile.TemporaryDirectory(prefix="ttft-uds-") as d:
        yield d


@pytest.fixture(scope="module")
def servers(launch, sockets_dir):
    stale = os.path.join(sockets_dir, "stale.sock")
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(stale)
    dead.close()  # a file nobody answers on, as a killed server leaves it
    private, shared = os.path.join(sockets_dir, "private.sock"), os.path.join(sockets_dir, "shared.sock")
    return launch.many([
        ((*TINY, "--uds", private), None),
        ((*TINY, "--uds", shared, "--uds-mode", "0660", "--access-log", "--log-stats-interval-s", "0.5"), None),
        ((*TINY, "--uds", stale), None),
    ])


def mode_of(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_the_socket_is_private_unless_asked_and_serves(servers):
    private, shared, _ = servers
    assert stat.S_ISSOCK(os.stat(private.uds).st_mode) and mode_of(private.uds) == 0o600
    assert mode_of(shared.uds) == 0o660
    for server in (private, shared):
        reply = server.http("POST", "/v1/completions", json=COMPLETION)
        assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 4


def test_a_second_server_on_a_live_path_is_refused_and_the_first_keeps_answering(servers):
    private = servers[0]
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "serve", *TINY, "--uds", private.uds],
                          cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"ttft serve: error: --uds {private.uds}: another server is listening on it" in proc.stderr
    assert private.http("GET", "/health").status_code == 200
    assert private.http("POST", "/v1/completions", json=COMPLETION).status_code == 200


def test_a_stale_socket_file_is_replaced(servers):
    assert servers[2].http("GET", "/health").status_code == 200


def test_the_access_log_and_the_stats_line_when_asked_for(servers):
    private, shared, _ = servers
    shared.http("POST", "/v1/completions", json=COMPLETION)
    deadline = time.monotonic() + 30
    while "generation throughput" not in shared.log():
        assert time.monotonic() < deadline, shared.log()
        shared.http("POST", "/v1/completions", json=COMPLETION)
        time.sleep(0.2)
    line = next(s for s in shared.log().splitlines() if "generation throughput" in s)
    assert "prompt throughput" in line and "running" in line and "KV cache" in line and "% used" in line
    assert '"POST /v1/completions HTTP/1.1" 200' in shared.log()
    assert "POST /v1/completions" not in private.log()  # no access log by default
    assert "starting: dummy:tiny on device auto" in private.log()
    assert f"listening on unix:{private.uds}" in private.log()


def test_the_socket_file_goes_with_the_server(servers):
    private = servers[0]
    assert private.stop() == 0
    assert not os.path.exists(private.uds)
