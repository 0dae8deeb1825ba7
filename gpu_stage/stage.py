"""GpuStage: runs the model on two dedicated threads, so the event loop never waits on it and the
device never waits for the host between steps.

    launcher:  takes each StepBatch from the inbox as it arrives and queues its work on the device
               (runner.launch), and early tier copies (runner.launch_transfer)
    completer: waits for each launched step's sampled ids, in launch order (runner.complete), and
               hands the StepResult to the scheduler

The inbox is the launch thread's own queue (launch_queue.py): the scheduler's `submit` puts a step
there from the event loop, with no task of this stage's in between (one would cost every step an
event-loop turn before its launch). With async scheduling the scheduler sends step N+1 while step N
runs, so the launcher queues it behind step N on the device before step N's result has reached the
host. The scheduler bounds the steps in flight (MAX_STEPS_IN_FLIGHT), which bounds both thread
queues. A failed step becomes a StepResult with `error` set: the scheduler turns it into an engine
failure (every in-flight request gets an error, /health goes 503).

On CPU the launcher computes each step, on as many OpenMP threads as a CpuThreadPolicy
(cpu_threads.py) gives it: all of them on a quiet host, one while other processes want the cores.
It must be the only thread that runs parallel torch work: libgomp counts every thread of every
team, and with more than the host has cores it stops its workers' spinning (a CPU engine builds
its model on a thread that then ends, pipeline/engine.py).
"""
from __future__ import annotations

import asyncio
import logging
import os
import queue
import threading
import time
import traceback
from typing import Callable

import torch

from gpu_stage.attention.cpu_decode_kernel import kernel as decode_kernel
from gpu_stage.cpu_caps import CpuPath, choose_path, detect
from gpu_stage.cpu_threads import CpuThreadPolicy, HostCpuLoad
from gpu_stage.launch_queue import LaunchQueue
from gpu_stage.model.cpu_ops import CpuOps
from gpu_stage.model_runner import LaunchedStep, ModelRunner
from stages.messages import MAX_STEPS_IN_FLIGHT, KvTransferOps, StepBatch, StepResult

log = logging.getLogger("ttft.gpu")

_STOP = None
STOP_WAIT_S = 10.0  # how long stop() waits for the step in flight before it lets the threads go
HOST_LOAD_READABLE = os.path.exists("/proc/stat") and os.path.exists("/proc/self/stat")  # Linux: CpuThreadPolicy


class GpuStage:
    def __init__(self, runner: ModelRunner, on_result: Callable[[StepResult], None],
                 cpu_threads: int | None = None) -> None:
        """`on_result`: each step's result, called on the event loop (SchedulerStage.take_result)."""
        self.name = "gpu"
        # Steps, and the early copies of a burst of arrivals: bounded by the scheduler (see above).
        self.inbox: LaunchQueue[StepBatch | KvTransferOps] = LaunchQueue("gpu.inbox", MAX_STEPS_IN_FLIGHT + 1)
        self.runner = runner
        self.on_result = on_result
        self.busy_ns = 0  # device-side time of the steps, overlaps not counted twice
        self._cpu_threads = cpu_threads
        self.thread_policy: CpuThreadPolicy | None = None  # CPU: made on the launch thread
        self.cpu_path: CpuPath | None = None  # CPU: what the CPU has and the path chosen for it
        self._completions: queue.SimpleQueue[LaunchedStep | StepResult | None] = queue.SimpleQueue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._threads: list[threading.Thread] = []
        self._warm = threading.Event()  # set once the launch thread is ready for steps

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        for target, name in ((self._launch_loop, "ttft-gpu-launch"), (self._complete_loop, "ttft-gpu-complete")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    @property
    def running(self) -> bool:
        return any(thread.is_alive() for thread in self._threads)

    async def wait_warm(self) -> None:
        """Return once the launch thread has built its per-thread caches (ModelRunner.warm_thread)."""
        await asyncio.to_thread(self._warm.wait)

    def submit(self, batch: StepBatch | KvTransferOps) -> None:
        """A step (or early tier copies) for the launch thread: the scheduler's call, on the loop."""
        self.inbox.put(batch)

    async def stop(self) -> None:
        """Launch what is queued, then end both threads."""
        self.inbox.close()  # the launcher passes the end on to the completer after the last step
        # Wait for both threads to end, the step in flight included: a process that exits while a
        # daemon thread is inside the model can die in interpreter shutdown (a server once exited
        # with SIGABRT right after a clean drain). Bounded, so that a hung device cannot hang it.
        deadline = time.monotonic() + STOP_WAIT_S
        for thread in self._threads:
            while thread.is_alive() and time.monotonic() < deadline:
                await asyncio.sleep(0.005)

    # -- threads -------------------------------------------------------------------------------
    def _launch_loop(self) -> None:
        if self._cpu_threads:  # OpenMP thread counts are per calling thread: the one running the model
            torch.set_num_threads(self._cpu_threads)
        if self.runner.device.type == "cuda":
            torch.cuda.set_device(self.runner.device)
        else:
            self._choose_cpu_path()
        if self.runner.device.type != "cuda" and HOST_LOAD_READABLE:
            self.thread_policy = CpuThreadPolicy(torch.get_num_threads(), HostCpuLoad())
        try:
            self.runner.warm_thread()  # per-thread caches, on the thread that launches the steps
        except Exception:  # not fatal: what it builds is built on first use instead
            log.error("warming the launch thread failed:\n%s", traceback.format_exc())
        finally:
            self._warm.set()
        while (batch := self.inbox.get()) is not None:
            if isinstance(batch, KvTransferOps):  # early tier copies: reported with the next step
                try:
                    self.runner.launch_transfer(batch)
                except Exception as exc:
                    log.error("tier copies failed:\n%s", traceback.format_exc())
                    self._completions.put(StepResult(-1, [], error=f"{type(exc).__name__}: {exc}"))
                continue
            if self.thread_policy is not None:
                self._set_threads(self.thread_policy)
            try:
                self._completions.put(self.runner.launch(batch))
            except Exception as exc:  # the whole step failed: the engine is broken
                log.error("model step %d failed:\n%s", batch.step_id, traceback.format_exc())
                self._completions.put(StepResult(batch.step_id, [], error=f"{type(exc).__name__}: {exc}"))
        self._completions.put(_STOP)

    def _choose_cpu_path(self) -> None:
        """Read the CPU once and log what it has and what the steps will use; never more threads than
        the cores this process may run on (more would spin against each other at every barrier)."""
        ops = getattr(self.runner.model, "ops", None)
        packed = "none"
        if isinstance(ops, CpuOps) and ops.head_weight is not None:
            packed = "head+layers" if ops.num_packed_layers else "head"
        fused = isinstance(ops, CpuOps) and ops.fused is not None
        self.cpu_path = choose_path(detect(), torch.get_num_threads(), packed, decode_kernel() is not None, fused)
        if torch.get_num_threads() > self.cpu_path.threads:
            torch.set_num_threads(self.cpu_path.threads)
        log.info("%s", self.cpu_path.line())

    @staticmethod
    def _set_threads(policy: CpuThreadPolicy) -> None:
        num_threads = policy.threads(time.monotonic())
        if torch.get_num_threads() != num_threads:  # per calling thread (OpenMP): the launcher's
            log.info("CPU steps now on %d thread(s): other processes used %.2f cores", num_threads,
                     policy.other_cores)
            torch.set_num_threads(num_threads)

    def _complete_loop(self) -> None:
        last_done_ns = 0
        while (item := self._completions.get()) is not _STOP:
            if isinstance(item, StepResult):  # failed at launch
                result, started_ns = item, time.perf_counter_ns()
            else:
                started_ns = item.started_ns
                try:
                    result = self.runner.complete(item)
                except Exception as exc:
                    log.error("model step %d failed:\n%s", item.result.step_id, traceback.format_exc())
                    result = StepResult(item.result.step_id, [], error=f"{type(exc).__name__}: {exc}")
            done_ns = time.perf_counter_ns()
            # The step's own time: from its launch, or from the previous step's end when it was
            # queued behind it on the device (the cost model learns step times from this).
            result.duration_ns = done_ns - max(started_ns, last_done_ns)
            last_done_ns = done_ns
            assert self._loop is not None
            try:
                self._loop.call_soon_threadsafe(self._deliver, result)
            except RuntimeError:  # the loop is closed: nobody waits for this step any more
                return

    def _deliver(self, result: StepResult) -> None:
        self.busy_ns += result.duration_ns
        self.on_result(result)  # (a stopped scheduler drops it: nobody waits for this step any more)
