"""The scheduler's and the emitter's per-step cost inside a running engine, to set beside
lab.host_overhead's hot loop: `python -m lab.scheduler_in_situ [--model dummy:tiny]
[--cpu-threads N] [--gc-freeze]` (`--model default`: the packaged SmolLM2, whose steps stream its
weights through the caches as the server's do).

An embedded Engine serves 16 token-id prompts (half 30 tokens, half 1,000; 64 output tokens each)
with 8 at a time, as issue 2's CPU workload does over HTTP. Every `Scheduler.schedule`,
`Scheduler.update` and `EmitterStage.deliver` call is timed on the thread's CPU clock; prints, as
JSON, for each the median us per request in decode-only steps, the median per call, and the calls.
`--gc-freeze` freezes the heap after warm-up; `--cpu-threads` sets torch's threads for the model.
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import time

import numpy as np

from emitter.stage import EmitterStage
from pipeline import Engine, EngineConfig
from scheduler.scheduler import Scheduler
from stages.sampling import SamplingParams

Calls = list[tuple[int, int, int]]  # (cpu ns, requests, tokens); decode-only: requests == tokens


def _timed(fn, calls: Calls):
    """`fn` (schedule or update) timed on the thread's CPU clock; its batch sizes the call."""
    def timed(self, *args):
        t0 = time.thread_time_ns()
        out = fn(self, *args)
        ns = time.thread_time_ns() - t0
        batch = args[0] if args else out
        if batch is not None:
            calls.append((ns, len(batch.chunks), batch.num_tokens))
        return out
    return timed


def _timed_emit(fn, calls: Calls):
    def timed(self, msg):
        t0 = time.thread_time_ns()
        fn(self, msg)  # a plain call from the scheduler's task: its CPU time is this thread's
        ns = time.thread_time_ns() - t0
        calls.append((ns, len(msg.events), sum(len(e.token_ids) for e in msg.events)))
    return timed


def _summary(calls: Calls) -> dict:
    decode = [ns / n / 1e3 for ns, n, tokens in calls if n and tokens == n]
    return {"calls": len(calls), "us_median_per_call": round(statistics.median(ns for ns, _, _ in calls) / 1e3, 1),
            "us_per_request_decode_steps": round(statistics.median(decode), 2) if decode else None,
            "num_decode_only_steps": len(decode)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.scheduler_in_situ", description=__doc__.split("\n")[0])
    p.add_argument("--model", default="dummy:tiny", help="'default': the server's default model")
    p.add_argument("--cpu-threads", type=int, default=None)
    p.add_argument("--gc-freeze", action="store_true")
    a = p.parse_args(argv)
    timings: dict[str, Calls] = {"schedule": [], "update": [], "emit": []}
    originals = (Scheduler.schedule, Scheduler.update, EmitterStage.deliver)
    Scheduler.schedule = _timed(Scheduler.schedule, timings["schedule"])
    Scheduler.update = _timed(Scheduler.update, timings["update"])
    EmitterStage.deliver = _timed_emit(EmitterStage.deliver, timings["emit"])
    try:
        asyncio.run(_serve(a, timings))
    finally:
        Scheduler.schedule, Scheduler.update, EmitterStage.deliver = originals
        gc.unfreeze()  # a frozen heap is never collected: leave the process as it was
    update = _summary(timings["update"])
    out = {"model": a.model, "cpu_threads": a.cpu_threads, "gc_freeze": a.gc_freeze,
           # (the first keys as before this probe timed schedule() and emit too)
           "update_calls": update["calls"], "update_us_median_per_call": update["us_median_per_call"],
           "update_us_per_request_decode_steps": update["us_per_request_decode_steps"],
           "num_decode_only_steps": update["num_decode_only_steps"],
           "schedule": _summary(timings["schedule"]), "emit": _summary(timings["emit"])}
    print(json.dumps(out, indent=1))
    return 0


async def _serve(a: argparse.Namespace, timings: dict[str, Calls]) -> None:
    cfg = EngineConfig(model=None if a.model == "default" else a.model, cpu_threads=a.cpu_threads,
                       max_model_len=2048)
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
        for calls in timings.values():
            calls.clear()
        await asyncio.gather(*(one(x) for x in prompts))


if __name__ == "__main__":
    raise SystemExit(main())
