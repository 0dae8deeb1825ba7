"""TokenizerPool: short inputs on the calling thread, long ones in the pool; the work is timed on the
request's trace when there is one."""
from __future__ import annotations

import threading

from ingress.tokenizer_pool import TokenizerPool
from stages.trace import RequestTrace


def thread_name(_: object) -> str:
    return threading.current_thread().name


async def test_long_inputs_run_in_the_pool_and_are_timed_on_the_trace():
    pool = TokenizerPool(offload_chars=10, num_threads=1)
    try:
        short, long = RequestTrace("s"), RequestTrace("l")
        assert await pool.run(short, 10, thread_name, None) == threading.current_thread().name
        assert (await pool.run(long, 11, thread_name, None)).startswith("ttft-tok")
        for trace in (short, long):
            assert "tokenized" in trace.marks_ns and "tokenize" in trace.host_ns
        assert "tokenize_wall_ms" in long.info and "tokenize_wall_ms" not in short.info
        assert (await pool.run(None, 11, len, "abc")) == 3  # no trace: nothing to time
    finally:
        pool.close()
