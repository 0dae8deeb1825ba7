"""A real `ttft serve` process on loopback for HTTP tests."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class ServerProcess:
    proc: subprocess.Popen
    base_url: str
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def metric(self, name: str, labels: str = "") -> float:
        text = httpx.get(f"{self.base_url}/metrics", timeout=10).text
        key = f"{name}{{{labels}}}" if labels else name
        for line in text.splitlines():
            if line.startswith(key + " "):
                return float(line.split()[-1])
        raise KeyError(key)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode


def start_server(tmp_path: Path, *args: str, timeout_s: float = 120.0, env: dict | None = None) -> ServerProcess:
    port = free_port()
    log_path = tmp_path / f"server-{port}.log"
    cmd = [sys.executable, "-m", "pipeline.cli", "serve", "--port", str(port), *args]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=open(log_path, "wb"), stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"},
    )
    server = ServerProcess(proc, f"http://127.0.0.1:{port}", log_path)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{server.log()}")
        try:
            if httpx.get(f"{server.base_url}/health", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"server not ready in {timeout_s} s:\n{server.log()}")


@pytest.fixture(scope="module")
def tiny_server(tmp_path_factory):
    server = start_server(tmp_path_factory.mktemp("tiny"), "--model", "dummy:tiny", "--max-model-len", "1024")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def smollm_server(tmp_path_factory):
    server = start_server(tmp_path_factory.mktemp("smol"))
    yield server
    server.stop()
