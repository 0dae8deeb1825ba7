"""TensorParallelDriver: rank 0 of a tensor-parallel engine, with its runner ready to serve.

`start` makes the group and builds the driver's runner (the engine then uses `runner` as it uses a
one-GPU ModelRunner: every launch broadcasts its step to the workers):
  - under torchrun the other ranks exist already (every node's torchrun started them; each rank
    other than 0 runs gpu_stage.parallel.worker) and the rendezvous is torchrun's store;
  - otherwise the driver hosts the store on a free local port and starts the workers of this
    node itself (launch.py), then waits until each reached the store, failing at once if one exits.
Then every rank connects the process group, loads its shard and builds its runner in lockstep.

Faults: the liveness monitor reports a worker that exits or stops (within ~one interval for an
exit, `stale_s` for a stop); the driver then kills the workers it started (a collective waiting on
a stopped peer then fails at once instead of at its timeout), records the reason in `fault`, and
calls `on_fault(reason)` (the engine's: /health 503, error events, a non-zero exit).
`close` ends the disk lanes and sends the stop header (unless faulted), waits for the workers,
kills what is left, and destroys the process group.

A process that exits with a driver still open (a SIGTERM during start-up cancels the engine's
start, whose thread goes on) closes it first (`close_open_drivers`, at the start of the
interpreter's shutdown): a start-up still running is told to stop and its workers are killed, so
that it ends within a few seconds. Else its thread would still be inside torch's C++ (a store
call, a collective) when the interpreter finalizes, and a thread ended there ends the process in
`terminate called without an active exception` (SIGABRT). One that does not end in time leaves
the process by os._exit.
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from typing import Callable

import torch.distributed as dist

from gpu_stage.loaders.model_source import ModelSource
from gpu_stage.parallel.group import (RENDEZVOUS_TIMEOUT_S, ParallelGroup, Placement, connect, disable_multicast,
                                      keep_gloo_on_loopback, local_store, placement_from_env, store_from_env,
                                      under_torchrun)
from gpu_stage.parallel.launch import WorkerProcesses
from gpu_stage.parallel.liveness import STALE_S, LivenessMonitor, started_key
from gpu_stage.parallel.runner_spec import RunnerSpec, build_runner
from gpu_stage.parallel.shard_plan import check_shardable
from gpu_stage.parallel.tensor_parallel import TensorParallel

log = logging.getLogger("ttft.parallel")

# How long a process on its way out waits for a start-up it stopped (its steps check every 20 ms;
# a collective with a killed peer fails at once).
EXIT_WAIT_S = 5.0


class StartupStopped(RuntimeError):
    """The process is exiting: a start-up still running stops."""


class TensorParallelDriver:
    def __init__(self, world_size: int, on_fault: Callable[[str], None] | None) -> None:
        self.world_size = world_size
        self._on_fault = on_fault
        self._fault_lock = threading.Lock()
        self.fault: str | None = None
        self.workers: WorkerProcesses | None = None
        self.monitor: LivenessMonitor | None = None
        self.group: ParallelGroup | None = None
        self.runner = None
        self._stopping = threading.Event()  # set at exit: a start-up still running stops
        self._started = threading.Event()  # set when `start` has returned or raised
        self._closed = False
        _open_drivers.add(self)

    @classmethod
    def start(cls, spec: RunnerSpec, world_size: int, on_fault: Callable[[str], None] | None = None,
              source: ModelSource | None = None, stale_s: float = STALE_S,
              startup_timeout_s: float = RENDEZVOUS_TIMEOUT_S) -> TensorParallelDriver:
        """`source`: the spec's model source when the caller loaded it already (its tokenizer, say)."""
        _close_open_drivers_at_exit()
        driver = cls(world_size, on_fault)
        try:
            driver._start(spec, source, stale_s, startup_timeout_s)
        except BaseException:
            driver.close(timeout_s=0.0)
            raise
        finally:
            driver._started.set()
        return driver

    def _start(self, spec: RunnerSpec, source: ModelSource | None, stale_s: float, startup_timeout_s: float) -> None:
        disable_multicast()
        source = source or spec.load_source()  # config and tokenizer: the weights stream later
        check_shardable(source.config, self.world_size)  # before any process starts
        if under_torchrun():
            placement = placement_from_env()
            if placement.rank != 0 or placement.world_size != self.world_size:
                raise ValueError(f"torchrun placed this process at rank {placement.rank} of {placement.world_size}; "
                                 f"the driver is rank 0 of --tensor-parallel-size {self.world_size}")
            store = store_from_env(placement)
        else:
            keep_gloo_on_loopback()  # here and in the workers, which inherit the environment
            store = local_store(self.world_size, startup_timeout_s)
            placement = Placement(0, self.world_size, 0, "127.0.0.1", store.port)
            self.workers = WorkerProcesses(spec, self.world_size, placement.master_addr, placement.master_port).start()
        self._wait_started(store, startup_timeout_s)
        self.monitor = LivenessMonitor(placement.master_addr, placement.master_port, 0, list(range(1, self.world_size)),
                                       self._fault, self.workers.exited if self.workers else None,
                                       stale_s=stale_s).start()
        self._check_stopping()
        self.group = connect(placement, store, spec.device, spec.collective_timeout_s)
        self._check_stopping()
        self.runner = build_runner(spec, source, TensorParallel.over(self.group, source.config), self.group.device)
        self._check_stopping()
        self.monitor.serving()
        log.info("tensor parallel driver ready: %d ranks%s", self.world_size,
                 f", workers {self.workers.pids}" if self.workers else " (torchrun)")

    def _wait_started(self, store: dist.Store, timeout_s: float) -> None:
        keys = [started_key(r) for r in range(1, self.world_size)]
        deadline = time.monotonic() + timeout_s
        while not store.check(keys):
            self._check_stopping()
            if self.workers is not None and (gone := self.workers.exited()) is not None:
                raise RuntimeError(f"tensor parallel start-up failed: {gone}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"tensor parallel start-up: not every worker joined within {timeout_s:.0f} s")
            time.sleep(0.02)

    def _check_stopping(self) -> None:
        if self._stopping.is_set():
            raise StartupStopped("tensor parallel start-up stopped: the process is exiting")

    def _fault(self, reason: str) -> None:
        with self._fault_lock:
            self.fault = reason
            if self.workers is not None:
                self.workers.kill()
            on_fault = self._on_fault
        if on_fault is not None:
            on_fault(reason)

    def watch(self, on_fault: Callable[[str], None]) -> None:
        """Report faults to `on_fault` from now on (at once, if one happened already)."""
        with self._fault_lock:
            self._on_fault = on_fault
            fault = self.fault
        if fault is not None:
            on_fault(fault)

    @property
    def worker_pids(self) -> list[int]:
        return self.workers.pids if self.workers is not None else []

    def close(self, timeout_s: float = 10.0) -> dict[int, int]:
        """Stop every worker (the stop header, then a kill past `timeout_s`) -> the exit status of
        each worker this driver started."""
        _open_drivers.discard(self)
        if self._closed:
            return {}
        self._closed = True
        if self.monitor is not None:
            self.monitor.stop()
        if self.runner is not None and self.fault is None:
            try:
                if self.runner.parallel.disk_lanes is not None:
                    self.runner.parallel.disk_lanes.stop()  # (the disk stage has stopped: no job runs)
                self.runner.parallel.steps.stop()
            except Exception as exc:  # a worker is gone: nothing to tell it
                log.warning("could not send the stop header: %s", exc)
        statuses = self.workers.stop(timeout_s) if self.workers is not None else {}
        if self.group is not None:
            self.group.close()
        elif dist.is_initialized():
            dist.destroy_process_group()
        return statuses

    def close_at_exit(self) -> None:
        """Called as the process exits: stop a start-up still running (its workers killed, so that
        nothing it waits for is coming) and wait for it, then close; os._exit when it does not end."""
        self._stopping.set()
        if not self._started.is_set():
            if self.workers is not None:
                self.workers.kill()
            if not self._started.wait(EXIT_WAIT_S):
                log.warning("tensor parallel start-up did not stop within %.0f s: exiting without it", EXIT_WAIT_S)
                logging.shutdown()
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(1 if self.fault else 0)
        self.close(timeout_s=0.0 if self.fault else 2.0)


_open_drivers: set[TensorParallelDriver] = set()
_exit_hook_registered = False


def _close_open_drivers_at_exit() -> None:
    """Register `close_open_drivers` (once) to run when the interpreter starts shutting down: before
    it joins the other non-daemon threads (a GPU start-up runs on one) and while daemon threads
    still run, which plain atexit functions would be too late for."""
    global _exit_hook_registered
    if not _exit_hook_registered:
        threading._register_atexit(close_open_drivers)  # type: ignore[attr-defined]
        _exit_hook_registered = True


def close_open_drivers() -> None:
    """Close every driver still open. The process is on its way out: another SIGINT or SIGTERM
    meanwhile changes nothing (it would only turn a bounded wait into a traceback)."""
    if not _open_drivers:
        return
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
    for driver in list(_open_drivers):
        driver.close_at_exit()
