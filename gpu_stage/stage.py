"""GpuStage: runs each step on one dedicated worker thread, so the event loop never waits on the
model. A failed step becomes a StepResult with `error` set: the scheduler turns it into an engine
failure (every in-flight request gets an error, /health goes 503)."""
from __future__ import annotations

import asyncio
import logging
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

import torch

from gpu_stage.model_runner import ModelRunner
from stages.channel import Channel, ChannelClosed
from stages.messages import StepBatch, StepResult
from stages.stage import Stage

log = logging.getLogger("ttft.gpu")


class GpuStage(Stage[StepBatch]):
    def __init__(
        self, runner: ModelRunner, result_inbox: Channel, inbox_size: int, cpu_threads: int | None = None
    ) -> None:
        super().__init__("gpu", inbox_size)
        self.runner = runner
        self.result_inbox = result_inbox
        self.busy_ns = 0
        # OpenMP thread counts are per calling thread: set it on the worker that runs the model.
        init = (lambda: torch.set_num_threads(cpu_threads)) if cpu_threads else None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ttft-gpu", initializer=init)

    def _execute(self, batch: StepBatch) -> StepResult:
        t0 = time.perf_counter_ns()
        try:
            result = self.runner.execute(batch)
        except Exception as exc:  # the whole step failed: the engine is broken
            log.error("model step %d failed:\n%s", batch.step_id, traceback.format_exc())
            result = StepResult(batch.step_id, [], error=f"{type(exc).__name__}: {exc}")
        result.duration_ns = time.perf_counter_ns() - t0
        return result

    async def handle(self, batch: StepBatch) -> None:
        loop = asyncio.get_running_loop()
        result = await loop.run_in_executor(self._executor, self._execute, batch)
        self.busy_ns += result.duration_ns
        try:
            await self.result_inbox.put(result)
        except ChannelClosed:
            pass  # shutting down: the scheduler is gone, and so is whoever waited for this step

    async def on_stop(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
