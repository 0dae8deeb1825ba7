"""Attacks on tensor parallelism (issue 42, item 7): the rendezvous store reachable from other hosts,
and signals during a `-tp 2` start-up. Multi-process code runs on CPU with gloo; several nodes under
torchrun (whose store listens where torchrun puts it) are tests/pipeline/test_tensor_parallel_http.py's."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from live_server import children, free_port, running

ROOT = Path(__file__).resolve().parents[2]
TP2 = ("--model", "dummy:tiny", "--device", "cpu", "-tp", "2", "--cpu-threads", "1")


def listening(pid: int) -> set[tuple[str, int]]:
    """(local address in /proc/net's hex, port) of every listening TCP socket `pid` holds."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                address, port = fields[1].rsplit(":", 1)
                found.add((address, int(port, 16)))
    return found


def start_tp2(tmp_path: Path, name: str) -> tuple[subprocess.Popen, Path]:
    """`ttft serve -tp 2`, returned once it listens (its engine still loading)."""
    log = tmp_path / f"{name}.log"
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "serve", "--port", str(free_port()), *TP2],
                            cwd=ROOT, stdout=open(log, "wb"), stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + 120
    while "listening on" not in log.read_text(errors="replace"):
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")
        time.sleep(0.05)
    return proc, log


def test_every_socket_of_a_tp2_server_and_its_worker_listens_on_loopback(tmp_path):
    """Attack: connect to the rendezvous store (or a gloo socket) from another host. The server: a
    one-node -tp 2 binds every internal socket to 127.0.0.1 (torch's store bound every interface)."""
    proc, log = start_tp2(tmp_path, "serving")
    try:
        deadline = time.monotonic() + 180
        while "engine ready" not in log.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.1)
        (worker,) = children(proc.pid)
        sockets = listening(proc.pid) | listening(worker)
        assert len(sockets) >= 3  # HTTP, the store, gloo's
        assert {address for address, _ in sockets} == {"0100007F"}, sockets  # 127.0.0.1 only
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, log.read_text(errors="replace")


def stop_during_start_up(tmp_path: Path, name: str, after_s: float, signals: list[int]) -> tuple[int, str, list[int]]:
    proc, log = start_tp2(tmp_path, name)
    time.sleep(after_s)
    kids = children(proc.pid)
    assert "engine ready" not in log.read_text(errors="replace"), "the start-up was over before the signal"
    for sig in signals:
        proc.send_signal(sig)
        time.sleep(0.3)
    status = proc.wait(60)
    return status, log.read_text(errors="replace"), kids


# After "listening on", a -tp 2 start-up still starts its worker, which imports torch and joins
# gloo: seconds on any machine, so the signals land inside it (stop_during_start_up asserts it).
@pytest.mark.parametrize("after_s", [0.2, 1.0, 1.8])
def test_sigterm_during_a_tp2_start_up_exits_0(tmp_path, after_s):
    """Attack (or an impatient supervisor): SIGTERM while `-tp 2` loads. The server: exit 0, no
    `terminate called without an active exception` (exit 134 before), no worker left."""
    status, log, kids = stop_during_start_up(tmp_path, f"term-{after_s}", after_s, [signal.SIGTERM])
    assert status == 0, log
    assert "terminate called" not in log and "Traceback" not in log, log
    time.sleep(0.5)
    assert not [pid for pid in kids if running(pid)]


def test_two_sigints_during_a_tp2_start_up_exit_without_a_traceback(tmp_path):
    """Attack: Ctrl-C twice while `-tp 2` loads. The server: no traceback, no SIGABRT; the first
    signal's clean exit (0) or the second signal's immediate one (1)."""
    status, log, kids = stop_during_start_up(tmp_path, "int-int", 1.0, [signal.SIGINT, signal.SIGINT])
    assert status in (0, 1), (status, log)
    assert "terminate called" not in log and "Traceback" not in log, log
    time.sleep(0.5)
    assert not [pid for pid in kids if running(pid)]
