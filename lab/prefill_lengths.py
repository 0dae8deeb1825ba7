"""Prefill step time against prompt length, cold and warm: `python lab/prefill_lengths.py`.

A first token may pay for something built per shape (a kernel compiled, an attention plan, a GEMM
heuristic) the first time a prompt length is met. Through ModelRunner at the Llama-3-8B shape
(Triton backend, CUDA graphs, the launch thread's warm-up done as the server does it), for each
length: the first step at that length (cold) and the median of three more (warm), in ms of
`execute()` wall time. `--profile N,...`: then, for each of those lengths, the host calls of its
cold step and of a warm one by own CPU time (torch.profiler), to name what the cold step pays for.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.gpu_prefill import BLOCK_SIZE, FIXED_BLOCKS, MODEL, Bench  # noqa: E402
from gpu_stage.loaders import load_model_source  # noqa: E402
from gpu_stage.model_runner import ModelRunner  # noqa: E402

LENGTHS = (2048, 1999, 2100, 2200, 2272, 2304, 2305, 2372, 2450, 2560, 3000, 3500, 4096)


def host_calls(bench: Bench, n: int) -> dict[str, tuple[int, float]]:
    """One prefill step of n tokens under the profiler -> {host op: (calls, own CPU ms)}."""
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        bench.prefill_ms(n, 0)  # prefill_ms runs two unmeasured reps: the first is the one we want
    return {e.key: (e.count, e.self_cpu_time_total / 1e3) for e in prof.key_averages()
            if e.device_type == DeviceType.CPU}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--profile", default="", help="comma list of lengths whose cold step to profile")
    a = p.parse_args()
    source = load_model_source(MODEL, seed=0)
    runner = ModelRunner.build(source, "cuda", torch.bfloat16, FIXED_BLOCKS, BLOCK_SIZE, max_num_batched_tokens=8192,
                               max_num_seqs=64, attention_backend="triton", enforce_eager=False, max_model_len=8192)
    runner.warm_thread()
    bench = Bench(runner, source.config.vocab_size)
    print(f"{'tokens':>7s} {'cold ms':>8s} {'warm ms':>8s} {'warm us/token':>14s}")
    for n in LENGTHS:
        t0 = time.perf_counter()
        times = bench.prefill_ms(n, 4)  # its two warm-up reps: the first is the cold one
        cold = bench.first_rep_ms
        warm = statistics.median(times[1:])
        print(f"{n:7d} {cold:8.2f} {warm:8.2f} {warm / n * 1e3:14.2f}   ({time.perf_counter() - t0:.1f} s)", flush=True)
    for n in (int(x) for x in a.profile.split(",") if x):
        cold, warm = host_calls(bench, n), host_calls(bench, n)  # two reps each: cold+warm, warm+warm
        extra = sorted(((ms - warm.get(k, (0, 0.0))[1], k, count, ms) for k, (count, ms) in cold.items()), reverse=True)
        print(f"\n{n} tokens, cold minus warm profile (two steps each), host ms by op:")
        for diff, key, count, ms in extra[:12]:
            print(f"  {diff:8.2f}  ({count} calls, {ms:.2f} ms cold)  {key[:90]}")


if __name__ == "__main__":
    main()
