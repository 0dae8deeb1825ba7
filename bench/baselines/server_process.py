"""Start a server (ttft or a transformers baseline) as a subprocess, wait for /health, stop it.

Used by the baseline suite and the ablation, which run one server at a time on the same device:
each is stopped (SIGTERM, then SIGKILL past a grace period) before the next one starts, so they
never share GPU memory. Server output goes to a log file whose tail is quoted when it fails.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _model_flag(model: str | None) -> list[str]:
    return [] if model is None else ["--model", model]  # None: the server's default (the packaged model)


def ttft_serve_command(model: str | None, port: int, flags: list[str]) -> list[str]:
    return [sys.executable, "-m", "pipeline.cli", "serve", *_model_flag(model), "--port", str(port), *flags]


def hf_server_command(model: str | None, mode: str, port: int, flags: list[str]) -> list[str]:
    return [sys.executable, "-m", "bench.baselines.hf_server", *_model_flag(model), "--mode", mode,
            "--port", str(port), *flags]


@dataclass
class ServerProcess:
    proc: subprocess.Popen
    base_url: str
    log_path: Path
    started_s: float  # seconds from launch to a 200 on /health

    def log_tail(self, num_lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-num_lines:])
        except OSError:
            return ""

    def stop(self, grace_s: float = 30.0) -> int | None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


def start_server(command: list[str], port: int, log_path: Path, ready_timeout_s: float = 300.0,
                 env: dict[str, str] | None = None, cwd: Path | None = None) -> ServerProcess:
    """Launch `command` (which listens on `port`) in `cwd` (default: this checkout) and return once
    /health answers 200; on exit or timeout raise RuntimeError quoting the log's tail (the process
    is stopped first)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(command, cwd=cwd or ROOT, stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"})
    server = ServerProcess(proc, f"http://127.0.0.1:{port}", log_path, 0.0)
    while time.monotonic() - t0 < ready_timeout_s:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with status {proc.returncode}:\n{server.log_tail()}")
        if _healthy(f"{server.base_url}/health"):
            server.started_s = time.monotonic() - t0
            return server
        time.sleep(0.25)
    server.stop()
    raise RuntimeError(f"server not ready in {ready_timeout_s:.0f} s:\n{server.log_tail()}")
