"""`ttft serve --data-parallel-size N`: each engine's flags and core share, refusals, and one live run
(two `dummy:tiny` engines behind the router; SIGTERM stops all three processes)."""
from __future__ import annotations

import signal
import subprocess
import sys
import time

import httpx
import pytest

from live_server import ROOT, children, free_port, running
from pipeline.cli import main
from pipeline.data_parallel import cpu_shares, replica_argv


def test_an_engine_gets_the_flags_less_the_fronts_on_loopback() -> None:
    argv = ["dummy:tiny", "--host", "0.0.0.0", "--port=9000", "-dp", "2", "--max-model-len", "512",
            "--data-parallel-size=2", "--api-key", "k"]
    assert replica_argv(argv, 7001, 4) == ["dummy:tiny", "--max-model-len", "512", "--api-key", "k",
                                           "--host", "127.0.0.1", "--port", "7001", "--cpu-threads", "4"]
    assert replica_argv(["--cpu-threads", "1"], 7001, 4)[-4:] == ["--host", "127.0.0.1", "--port", "7001"]
    assert "--cpu-threads" not in replica_argv([], 7001, None)


def test_cores_are_split_in_contiguous_shares() -> None:
    assert cpu_shares(2, [0, 1, 2, 3, 4]) == [[0, 1], [2, 3]]
    assert cpu_shares(3, [0, 1]) == [[0], [1], [0]]


@pytest.mark.parametrize("argv, message", [
    (["-dp", "0"], "--data-parallel-size 0: must be >= 1"),
    (["-dp", "2", "--uds", "/tmp/x.sock"], "--uds: not supported"),
    (["-dp", "2", "--ssl-certfile", "c.pem", "--ssl-keyfile", "k.pem"], "not supported"),
])
def test_mistakes_exit_2(capsys, argv, message) -> None:
    assert main(["serve", "--model", "dummy:tiny", *argv]) == 2
    assert message in capsys.readouterr().err


def test_two_engines_behind_the_router_then_sigterm_stops_everything(tmp_path) -> None:
    port = free_port()
    log = open(tmp_path / "dp.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "serve", "--model", "dummy:tiny",
                             "--max-model-len", "512", "-dp", "2", "--port", str(port)],
                            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        health = {}
        while time.monotonic() < deadline and health.get("num_ready") != 2:
            assert proc.poll() is None, (tmp_path / "dp.log").read_text()
            try:
                health = httpx.get(f"{url}/health", timeout=5).json()
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        assert health.get("num_ready") == 2, (tmp_path / "dp.log").read_text()
        engines = children(proc.pid)
        assert len(engines) == 2
        r = httpx.post(f"{url}/v1/completions", json={"model": "dummy:tiny", "prompt": "hi", "max_tokens": 3}, timeout=10)
        assert r.status_code == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        assert not any(running(pid) for pid in engines)
    finally:
        if proc.poll() is None:
            proc.kill()
