"""A real `ttft serve` process on loopback for HTTP tests, and the fixtures that start one
(imported by the conftest of each folder whose tests talk to a live server)."""
from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from bench.prom_text import parse_metrics

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class ServerProcess:
    proc: subprocess.Popen
    base_url: str
    log_path: Path
    uds: str | None = None  # served on this Unix socket (`--uds`) instead of TCP
    ssl_context: ssl.SSLContext | None = None  # https (`--ssl-certfile`): the client's TLS context

    def http(self, method: str, path: str, **kwargs) -> httpx.Response:
        transport = httpx.HTTPTransport(uds=self.uds) if self.uds else None
        with httpx.Client(transport=transport, timeout=10, verify=self.ssl_context or True) as client:
            return client.request(method, f"{self.base_url}{path}", **kwargs)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def metric(self, name: str, labels: str = "") -> float:
        """One series' value; `labels` as written, without the model_name label every series has."""
        key = f"{name}{{{labels}}}" if labels else name
        return parse_metrics(self.http("GET", "/metrics").text)[key]

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode


def start_server(tmp_path: Path, *args: str, timeout_s: float = 120.0, env: dict | None = None,
                 ssl_context: ssl.SSLContext | None = None) -> ServerProcess:
    """`ssl_context`: the server serves https (its --ssl-* flags in `args`); the client's context."""
    port = free_port()
    log_path = tmp_path / f"server-{port}.log"
    cmd = [sys.executable, "-m", "pipeline.cli", "serve", "--port", str(port), *args]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=open(log_path, "wb"), stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"},
    )
    uds = args[args.index("--uds") + 1] if "--uds" in args else None
    scheme = "https" if ssl_context is not None else "http"
    server = ServerProcess(proc, f"{scheme}://127.0.0.1:{port}", log_path, uds, ssl_context)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{server.log()}")
        try:
            if server.http("GET", "/health").status_code == 200:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"server not ready in {timeout_s} s:\n{server.log()}")


def children(pid: int) -> list[int]:
    """The processes `pid` started (of any of its threads) that it has not reaped."""
    kids = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        kids += [int(k) for k in (task / "children").read_text().split()]
    return kids


def running(pid: int) -> bool:
    """Whether `pid` exists and is no zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


# A pool of 4,096 blocks (64 sequences of 1,024 tokens; 32 MiB for dummy:tiny), not the CPU's default
# 1 GiB, whose zeroing at start and unmapping at stop cost each server ~0.9 s of CPU and ~1 s more to stop.
TINY_FLAGS = ("--model", "dummy:tiny", "--max-model-len", "1024", "--num-kv-blocks", "4096")


@pytest.fixture(scope="module")
def tiny_server(tmp_path_factory):
    server = start_server(tmp_path_factory.mktemp("tiny"), *TINY_FLAGS)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def smollm_server(tmp_path_factory):
    """SmolLM2 with the default flags: one server for every file a worker runs that asks for it,
    not one per file (a start is a process's imports and the model's load). Those files look only
    at their own requests (their replies, their request ids, blocks back to 0 once they are done)
    and a worker runs one file at a time, so a server that served another file's requests first
    proves the same. A file that counts the server's whole life starts its own (`launch`)."""
    server = start_server(tmp_path_factory.mktemp("smol"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def launch(tmp_path_factory):
    """`launch(*flags, env=None)` starts a `ttft serve` with any flags; `launch.many([...])` starts
    several at once (their start-up is mostly imports: in parallel they cost about one). All are
    stopped when the module ends (a test that kills its own server first is fine)."""
    from concurrent.futures import ThreadPoolExecutor

    started: list[ServerProcess] = []

    def start(*args: str, env: dict | None = None, log_dir: Path | None = None,
              ssl_context: ssl.SSLContext | None = None) -> ServerProcess:
        server = start_server(log_dir or tmp_path_factory.mktemp("srv"), *args, env=env, ssl_context=ssl_context)
        started.append(server)
        return server

    def many(specs: list[tuple[tuple[str, ...], dict | None]]) -> list[ServerProcess]:
        dirs = [tmp_path_factory.mktemp("srv") for _ in specs]  # not thread-safe: made here
        with ThreadPoolExecutor(len(specs)) as pool:
            return list(pool.map(lambda sd: start(*sd[0][0], env=sd[0][1], log_dir=sd[1]), zip(specs, dirs)))

    start.many = many
    yield start
    for server in started:
        server.stop()
