"""A `ttft route` process in front of live replicas, and a socket that accepts but never answers."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from live_server import ROOT, ServerProcess, free_port

TINY = ("--model", "dummy:tiny", "--max-model-len", "2048", "--num-kv-blocks", "4096")  # not 1 GiB (live_server.TINY_FLAGS)


@dataclass
class RouterProcess:
    proc: subprocess.Popen
    base_url: str
    log_path: Path

    def http(self, method: str, path: str, **kwargs) -> httpx.Response:
        with httpx.Client(timeout=10) as client:
            return client.request(method, f"{self.base_url}{path}", **kwargs)

    def replica_states(self) -> dict[str, str]:
        return {r["url"]: r["state"] for r in self.http("GET", "/health").json()["replicas"]}

    def in_flight(self) -> dict[str, int]:
        return {r["url"]: r["in_flight"] for r in self.http("GET", "/health").json()["replicas"]}

    def wait_state(self, url: str, state: str, timeout_s: float) -> float:
        """Seconds until the router sees `url` in `state` (AssertionError past `timeout_s`)."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            if self.replica_states()[url] == state:
                return time.monotonic() - t0
            time.sleep(0.05)
        raise AssertionError(f"{url} not {state} in {timeout_s} s: {self.replica_states()}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode


def start_router(tmp_path: Path, urls: list[str], *flags: str, timeout_s: float = 30.0) -> RouterProcess:
    port = free_port()
    log_path = tmp_path / f"router-{port}.log"
    args = [a for u in urls for a in ("--replica", u)]
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "route", "--port", str(port), *args, *flags],
                            cwd=ROOT, stdout=open(log_path, "wb"), stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    router = RouterProcess(proc, f"http://127.0.0.1:{port}", log_path)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"router exited with {proc.returncode}:\n{log_path.read_text()}")
        try:
            if router.http("GET", "/live").status_code == 200:
                return router
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    router.stop()
    raise RuntimeError(f"router not up in {timeout_s} s:\n{log_path.read_text()}")


def silent_listener() -> tuple[socket.socket, str]:
    """A socket whose connections the kernel accepts (the backlog) and nobody ever answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    return sock, f"http://127.0.0.1:{sock.getsockname()[1]}"


def num_active(replica: ServerProcess) -> int:
    return replica.http("GET", "/replica/state").json().get("num_active", 0)


def stream_lines(response: httpx.Response):
    for line in response.iter_lines():
        if line:
            yield line
