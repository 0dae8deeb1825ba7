"""The scheduler's update() cost inside a running engine, to set beside bench.host_overhead's hot
loop: `python -m bench.scheduler_in_situ [--model dummy:tiny] [--cpu-threads N] [--gc-freeze]`.

An embedded Engine serves 16 token-id prompts (half 30 tokens, half 1,000; 64 output tokens each)
with 8 at a time, as issue 2's CPU workload does over HTTP. Every `Scheduler.update` call is timed
on the thread's CPU clock; prints, as JSON, the median us per request in decode-only steps, the
median per call, and the calls. `--gc-freeze` freezes the heap after warm-up; `--cpu-threads` sets
torch's threads for the model.
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import time

import numpy as np

from pipeline import Engine, EngineConfig
from scheduler.scheduler import Scheduler
from stages.sampling import SamplingParams


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.scheduler_in_situ", description=__doc__.split("\n")[0])
    p.add_argument("--model", default="dummy:tiny")
    p.add_argument("--cpu-threads", type=int, default=None)
    p.add_argument("--gc-freeze", action="store_true")
    a = p.parse_args(argv)
    calls: list[tuple[int, int, int]] = []  # (cpu ns, chunks, tokens)
    update = Scheduler.update

    def timed_update(self, batch, result):
        t0 = time.thread_time_ns()
        events = update(self, batch, result)
        calls.append((time.thread_time_ns() - t0, len(batch.chunks), batch.num_tokens))
        return events

    Scheduler.update = timed_update
    try:
        out = asyncio.run(_serve(a, calls))
    finally:
        Scheduler.update = update
        gc.unfreeze()  # a frozen heap is never collected: leave the process as it was
    print(json.dumps(out, indent=1))
    return 0


async def _serve(a: argparse.Namespace, calls: list[tuple[int, int, int]]) -> dict:
    cfg = EngineConfig(model=a.model, cpu_threads=a.cpu_threads, max_model_len=2048)
    if a.model.startswith("dummy:"):
        cfg.num_kv_blocks = 4096
    async with Engine(cfg) as engine:
        rng = np.random.default_rng(0)
        high = min(engine.tokenizer.vocab_size, 40000)
        prompts = [[int(t) for t in rng.integers(100, high, 30 if i % 2 else 1000)] for i in range(16)]
        params = SamplingParams(max_tokens=64, temperature=0.0, ignore_eos=True)
        gate = asyncio.Semaphore(8)

        async def one(prompt: list[int]) -> None:
            async with gate:
                async for _ in engine.generate(prompt, params):
                    pass

        await one([5, 6, 7])  # warm-up
        if a.gc_freeze:
            gc.collect()
            gc.freeze()
        calls.clear()
        await asyncio.gather(*(one(x) for x in prompts))
    decode = [ns / chunks / 1e3 for ns, chunks, tokens in calls if chunks and tokens == chunks]
    return {"model": a.model, "cpu_threads": a.cpu_threads, "gc_freeze": a.gc_freeze, "update_calls": len(calls),
            "update_us_median_per_call": round(statistics.median(ns for ns, _, _ in calls) / 1e3, 1),
            "update_us_per_request_decode_steps": round(statistics.median(decode), 2),
            "num_decode_only_steps": len(decode)}


if __name__ == "__main__":
    raise SystemExit(main())
