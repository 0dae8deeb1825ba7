"""TokenizerPool: a request's tokenizer work, on the event loop when its input is short and in a
small thread pool when it is long, so that a 1 MB prompt never stalls the loop.

The pool's bound is its queue, and the limits checked before (protocol/limits.py) keep its jobs
small. Work done for a request is timed on its trace: the tokenizer's own CPU time as host work, and
apart from it the wall time, which in a worker counts the waits for a core and for the interpreter
lock (so that a wait can be told from work).
"""
from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, TypeVar

from stages.trace import RequestTrace, cpu_clock_ns, host_clock_ns

A = TypeVar("A")
R = TypeVar("R")


class TokenizerPool:
    def __init__(self, offload_chars: int, num_threads: int) -> None:
        self.offload_chars = offload_chars  # inputs longer than this run in the pool
        self._pool = ThreadPoolExecutor(max_workers=num_threads, thread_name_prefix="ttft-tok")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def run(self, trace: RequestTrace | None, num_chars: int, fn: Callable[[A], R], arg: A) -> R:
        """fn(arg), in the pool when the input is long; timed on `trace` when there is one."""
        if num_chars > self.offload_chars:
            t0 = time.perf_counter_ns()
            result, work_ns, wall_ns = await asyncio.get_running_loop().run_in_executor(self._pool, _timed, fn, arg)
            if trace is not None:
                trace.info["tokenize_wall_ms"] = round((time.perf_counter_ns() - t0) / 1e6, 4)
        else:
            result, work_ns, wall_ns = _timed(fn, arg)
        if trace is not None:
            trace.add_host("tokenize", work_ns, wall_ns)
            trace.mark("tokenized")
        return result


def _timed(fn: Callable[[A], R], arg: A) -> tuple[R, int, int]:
    """fn(arg), its own CPU time and its wall time."""
    c0, t0 = cpu_clock_ns(), host_clock_ns()
    result = fn(arg)
    return result, cpu_clock_ns() - c0, host_clock_ns() - t0
