"""A process that exits while a tensor-parallel start-up runs on another thread (a SIGTERM during
`ttft serve -tp 2`'s loading cancels the engine's start, whose thread goes on): the start-up is
stopped and closed before the interpreter finalizes, so the process exits with its own status,
never in `terminate called without an active exception` (SIGABRT), and no worker is left."""
from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from gpu_stage.parallel.driver import StartupStopped, TensorParallelDriver, _open_drivers, close_open_drivers

ROOT = Path(__file__).resolve().parents[3]
# Exits after `delay` seconds while build_model(-tp 2, CPU) runs on a daemon thread, as a server's
# start-up does; prints the worker pids it started.
SCRIPT = """
import sys, threading, time
from pipeline.build import build_model
from pipeline.config import EngineConfig
import gpu_stage.parallel.driver as driver
cfg = EngineConfig(model="dummy:tiny", device="cpu", tensor_parallel_size=2, cpu_threads=1)
def build():
    try:
        build_model(cfg)
    except driver.StartupStopped:
        pass
threading.Thread(target=build, daemon=True).start()
time.sleep(float(sys.argv[1]))
print("workers", *[p for d in list(driver._open_drivers) for p in d.worker_pids], flush=True)
sys.exit(int(sys.argv[2]))
"""


@pytest.mark.parametrize("delay_s, status", [(0.5, 0), (2.0, 0), (3.5, 0), (5.0, 3)])
def test_exiting_during_a_start_up_keeps_the_exit_status(delay_s, status):
    result = subprocess.run([sys.executable, "-c", SCRIPT, str(delay_s), str(status)], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == status, result.stderr[-3000:]
    assert "terminate called" not in result.stderr and "Traceback" not in result.stderr, result.stderr[-3000:]
    pids = [int(p) for p in result.stdout.split()[1:]]
    for pid in pids:  # killed, and reaped by the exiting process
        assert not Path(f"/proc/{pid}").exists() or "(Z" not in Path(f"/proc/{pid}/stat").read_text()


class _Store:
    def check(self, keys: list[str]) -> bool:
        return False


def test_a_start_up_waiting_for_its_workers_stops_when_the_process_exits():
    driver = TensorParallelDriver(2, None)
    raised: list[BaseException] = []

    def wait() -> None:
        try:
            driver._wait_started(_Store(), timeout_s=60.0)
        except BaseException as exc:
            raised.append(exc)
        finally:
            driver._started.set()

    thread = threading.Thread(target=wait)
    thread.start()
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        close_open_drivers()  # what the interpreter's shutdown calls
        assert all(signal.getsignal(sig) == signal.SIG_IGN for sig in handlers)  # the process is leaving
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    thread.join(timeout=5.0)
    assert not thread.is_alive() and isinstance(raised[0], StartupStopped)
    assert driver not in _open_drivers
