"""Faults of a tensor-parallel group on CPU: a worker killed is a fault within a second (the
driver's next step raises, on_fault names the worker), a stopped worker is one within the
heartbeat threshold, a worker that dies while starting is seen at once, and no worker ever
outlives its driver (the process table is checked)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch
from gpu_runner_helpers import greedy

from gpu_stage.parallel.driver import TensorParallelDriver
from gpu_stage.parallel.group import RankLost
from gpu_stage.parallel.runner_spec import RunnerSpec
from stages.messages import NewRequestData, ScheduledChunk, StepBatch
from stages.sampling import SamplingParams

ARGS = dict(num_blocks=32, block_size=4, max_num_batched_tokens=32, max_num_seqs=4)
SPEC = RunnerSpec("dummy:tiny", "cpu", "float32", ARGS, cpu_threads=1)
REPO = Path(__file__).resolve().parents[3]


def running(pid: int) -> bool:
    """In the process table and not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def gone_within(pid: int, timeout_s: float) -> None:
    """Wait until `pid` has exited (a zombie counts: its sockets are closed)."""
    deadline = time.monotonic() + timeout_s
    while running(pid):
        assert time.monotonic() < deadline, f"pid {pid} still runs {timeout_s} s after SIGKILL"
        time.sleep(0.005)


class Faults:
    def __init__(self) -> None:
        self.reasons: list[tuple[float, str]] = []
        self.seen = threading.Event()

    def __call__(self, reason: str) -> None:
        self.reasons.append((time.monotonic(), reason))
        self.seen.set()


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def a_step(runner, step_id: int) -> None:
    new = [NewRequestData(f"q{step_id}", [3, 4, 5], SamplingParams(temperature=0.0))]
    runner.execute(StepBatch(step_id, new, [ScheduledChunk(f"q{step_id}", [3, 4, 5], 0, [1], True)]))


def test_killed_worker_fails_the_next_step_and_is_reported(one_thread):
    faults = Faults()
    driver = TensorParallelDriver.start(SPEC, 2, on_fault=faults)
    try:
        assert len(greedy(driver.runner, "a", [5, 6, 7], 3)) == 3
        (pid,) = driver.worker_pids
        killed = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        gone_within(pid, 5.0)  # its sockets closed: a send to a dying, still-live peer could block
        with pytest.raises(RankLost, match="tensor parallel .* failed, a rank is gone: .*Connection"):
            a_step(driver.runner, 10)
        raised = time.monotonic() - killed
        assert faults.seen.wait(2.0), "the monitor did not report the exit"
        reported = faults.reasons[0][0] - killed
        print(f"step raised after {raised:.3f} s, monitor reported after {reported:.3f} s")
        assert raised < 2.0 and reported < 2.0
        assert faults.reasons[0][1] == f"worker rank 1 (pid {pid}) exited with signal SIGKILL"
        assert driver.fault is not None
    finally:
        statuses = driver.close(timeout_s=1.0)
    assert statuses == {1: -signal.SIGKILL} and not running(pid)


def test_stopped_worker_is_a_fault_within_the_heartbeat_threshold(one_thread):
    faults = Faults()
    driver = TensorParallelDriver.start(SPEC, 2, on_fault=faults, stale_s=1.0)
    (pid,) = driver.worker_pids
    try:
        a_step(driver.runner, 1)
        stopped = time.monotonic()
        os.kill(pid, signal.SIGSTOP)  # alive but silent: a hang
        assert faults.seen.wait(4.0), "no fault for a stopped worker"
        detected = faults.reasons[0][0] - stopped
        print(f"stopped worker reported after {detected:.2f} s: {faults.reasons[0][1]}")
        assert 1.0 <= detected < 2.5 and "rank 1 sent no heartbeat" in faults.reasons[0][1]
        assert not running(pid)  # the driver killed it, so that no collective waits on it
        with pytest.raises(RuntimeError):
            a_step(driver.runner, 2)
    finally:
        driver.close(timeout_s=1.0)
    assert not running(pid)


def test_a_size_that_cannot_shard_the_model_fails_before_any_worker_starts():
    started = time.monotonic()
    with pytest.raises(ValueError, match=r"--tensor-parallel-size 3 cannot shard this model \(4 attention heads, 2 KV"):
        TensorParallelDriver.start(SPEC, 3)
    assert time.monotonic() - started < 1.0


def test_worker_dying_at_start_up_is_reported_at_once(one_thread):
    faults = Faults()
    factory = f"{Path(__file__).with_name('tp_sources.py')}:fails_on_workers"
    spec = RunnerSpec(None, "cpu", "float32", ARGS, source_factory=factory, cpu_threads=1)
    started = time.monotonic()
    driver = TensorParallelDriver.start(spec, 2, on_fault=faults)
    try:
        assert faults.seen.wait(10.0)
        print(f"reported {faults.reasons[0][0] - started:.2f} s after start: {faults.reasons[0][1]}")
        assert faults.reasons[0][1].endswith("exited with status 3")
    finally:
        statuses = driver.close(timeout_s=1.0)
    assert statuses == {1: 3}


DRIVER_SCRIPT = textwrap.dedent("""
    import sys, time
    from gpu_stage.parallel.driver import TensorParallelDriver
    from gpu_stage.parallel.runner_spec import RunnerSpec
    spec = RunnerSpec.from_json(sys.argv[1])
    driver = TensorParallelDriver.start(spec, 2)
    print(" ".join(map(str, driver.worker_pids)), flush=True)
    time.sleep(120)
""")


@pytest.mark.parametrize("how", ["killed", "stopped"])
def test_workers_exit_when_their_driver_is_gone(how):
    """Killed: the lifeline pipe closes. Stopped (SIGSTOP: a hung driver, which also hosts the
    store): the worker's heartbeat reads time out."""
    proc = subprocess.Popen([sys.executable, "-c", DRIVER_SCRIPT, SPEC.to_json()], cwd=REPO, stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert len(pids) == 1 and all(running(p) for p in pids)
        killed = time.monotonic()
        if how == "killed":
            proc.kill()
            proc.wait()
        else:
            os.kill(proc.pid, signal.SIGSTOP)
        while any(running(p) for p in pids) and time.monotonic() - killed < 10.0:
            time.sleep(0.05)
        gone = time.monotonic() - killed
        print(f"workers gone {gone:.2f} s after their driver was {how}")
        assert not any(running(p) for p in pids) and gone < (2.0 if how == "killed" else 4.5)
    finally:
        proc.kill()  # SIGKILL ends a stopped process too
        proc.wait()
