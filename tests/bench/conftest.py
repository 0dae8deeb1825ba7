"""Fixtures: the fake OpenAI-compatible server (fake_openai_server.py) in its own process, and a
machine without matplotlib (the plots' built-in drawing).

A separate process, not a thread, so the server never competes with the client for the GIL: on a busy
shared machine the measured delays are then the ones the tests asked for plus OS scheduling only.
"""
from __future__ import annotations

import builtins
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

SERVER_SCRIPT = Path(__file__).with_name("fake_openai_server.py")


@dataclass
class FakeServer:
    base_url: str
    uds: str | None

    def bodies(self) -> list[dict]:
        """Every request body the server has received so far."""
        with httpx.Client(transport=httpx.HTTPTransport(uds=self.uds)) as client:
            return client.get(f"{self.base_url}/fake/bodies").json()


def _start(sock: socket.socket, fake: FakeServer, keep_alive_s: float) -> subprocess.Popen:
    sock.listen(128)
    args = [sys.executable, str(SERVER_SCRIPT), str(sock.fileno()), str(keep_alive_s)]
    if fake.uds:
        args.append("unix")
    proc = subprocess.Popen(args, pass_fds=[sock.fileno()])
    deadline = time.monotonic() + 30
    while True:  # the socket already listens: the first answer means the app is serving
        try:
            fake.bodies()
            return proc
        except httpx.HTTPError:
            assert proc.poll() is None, "fake server exited"
            assert time.monotonic() < deadline, "fake server did not start"
            time.sleep(0.05)


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def fake_server():
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    fake = FakeServer(f"http://127.0.0.1:{sock.getsockname()[1]}", None)
    proc = _start(sock, fake, keep_alive_s=0.3)  # short, so a test sees idle connections closed
    yield fake
    _stop(proc)
    sock.close()


@pytest.fixture(scope="module")
def fake_uds_server():
    path = str(Path(tempfile.mkdtemp(prefix="ttft-bench-")) / "fake.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    fake = FakeServer("http://localhost", path)
    proc = _start(sock, fake, keep_alive_s=5)
    yield fake
    _stop(proc)
    sock.close()


@pytest.fixture
def no_matplotlib(monkeypatch):
    """Imports of matplotlib fail, as on a machine without it (this project's venv may have it)."""
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError("no matplotlib here")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
