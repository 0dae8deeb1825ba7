"""WorkerProcesses: the worker ranks of one node, started by the driver when torchrun did not.

Each worker is `python -m gpu_stage.parallel.worker` with torchrun's variables set for its rank
(MASTER_ADDR/PORT pointing at the driver's store, WORLD_SIZE, RANK, LOCAL_RANK = RANK), NVLink
multicast off, and the RunnerSpec as JSON: nothing is pickled, and a worker started here runs the
very code a torchrun rank runs.

No worker outlives the driver: each holds the read end of a lifeline pipe whose write end only the
driver holds (not inherited by anything it starts later), so when the driver's process ends, by
any means, the worker's read returns EOF and it exits. (PR_SET_PDEATHSIG would fire when the
*thread* that started the worker ends, and the engine starts them from a start-up thread.)
`stop` waits for the workers to leave after the stop header, then kills what is left; `kill`
kills at once. Workers ignore SIGINT and SIGTERM (worker.py): Ctrl-C reaches the terminal's whole
process group, and the driver, not each worker, decides how to drain.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

from gpu_stage.parallel.group import MULTICAST_OFF
from gpu_stage.parallel.runner_spec import ENV_VAR, RunnerSpec
from gpu_stage.parallel.worker import LIFELINE_ENV


def describe_exit(rank: int, pid: int, status: int) -> str:
    how = f"signal {signal.Signals(-status).name}" if status < 0 else f"status {status}"
    return f"worker rank {rank} (pid {pid}) exited with {how}"


class WorkerProcesses:
    def __init__(self, spec: RunnerSpec, world_size: int, master_addr: str, master_port: int) -> None:
        self.spec, self.world_size = spec, world_size
        self.master_addr, self.master_port = master_addr, master_port
        self.procs: dict[int, subprocess.Popen] = {}
        self._lifeline: int | None = None
        self._lock = threading.Lock()

    def start(self) -> WorkerProcesses:
        read_end, self._lifeline = os.pipe()  # both non-inheritable; the read end is passed explicitly
        try:
            for rank in range(1, self.world_size):
                env = {**os.environ, **MULTICAST_OFF, "MASTER_ADDR": self.master_addr,
                       "MASTER_PORT": str(self.master_port), "WORLD_SIZE": str(self.world_size),
                       "RANK": str(rank), "LOCAL_RANK": str(rank), ENV_VAR: self.spec.to_json(),
                       LIFELINE_ENV: str(read_end)}
                self.procs[rank] = subprocess.Popen([sys.executable, "-m", "gpu_stage.parallel.worker"], env=env,
                                                    pass_fds=(read_end,), stdin=subprocess.DEVNULL)
        except BaseException:
            self.kill()
            raise
        finally:
            os.close(read_end)
        return self

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs.values()]

    def exited(self) -> str | None:
        """The first worker found gone, described; None while all run."""
        for rank, proc in self.procs.items():
            status = proc.poll()
            if status is not None:
                return describe_exit(rank, proc.pid, status)
        return None

    def stop(self, timeout_s: float = 10.0) -> dict[int, int]:
        """Wait up to `timeout_s` for every worker to exit (they were sent the stop header), kill the
        rest -> each rank's exit status."""
        deadline = time.monotonic() + timeout_s
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        self.kill()
        return {rank: proc.returncode for rank, proc in self.procs.items()}

    def kill(self) -> None:
        """SIGKILL every worker still running, reap them, and drop the lifeline (from any thread:
        the liveness monitor's or the engine's)."""
        with self._lock:
            for proc in self.procs.values():
                if proc.poll() is None:
                    proc.kill()
            for proc in self.procs.values():
                proc.wait()
            if self._lifeline is not None:
                os.close(self._lifeline)
                self._lifeline = None
