"""Where a step's time goes on the GPU: `python bench/gpu_profile.py` profiles one 2,048-token
prefill and a batch-1 decode step of the Llama-3-8B shape through ModelRunner (triton backend,
CUDA graphs) with torch.profiler, and prints the kernels by total device time and the gap between
wall time and device time (host overhead, launches, syncs)."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.gpu_prefill import BLOCK_SIZE, FIXED_BLOCKS, MODEL, Bench  # noqa: E402
from gpu_stage.loaders import load_model_source  # noqa: E402
from gpu_stage.model_runner import ModelRunner  # noqa: E402


def report(prof, label: str, wall_ms: float) -> None:
    events = [e for e in prof.key_averages() if e.device_time_total > 0]
    events.sort(key=lambda e: e.device_time_total, reverse=True)
    total = sum(e.device_time_total for e in events) / 1e3
    print(f"\n== {label}: wall {wall_ms:.2f} ms, device {total:.2f} ms (sum of kernel times)")
    for e in events[:14]:
        print(f"  {e.device_time_total / 1e3:8.2f} ms  {e.count:5d}x  {e.key[:90]}")


def main() -> None:
    source = load_model_source(MODEL, seed=0)
    runner = ModelRunner(source, "cuda", torch.bfloat16, FIXED_BLOCKS, BLOCK_SIZE, max_num_batched_tokens=8192,
                         max_num_seqs=64, attention_backend="triton", enforce_eager=False,
                         max_model_len=8192)
    bench = Bench(runner, source.config.vocab_size)
    bench.prefill_ms(2048, 2)
    bench.decode_ms(1, 2048, 3)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        bench.prefill_ms(2048, 1)
        wall = (time.perf_counter() - t0) * 1e3 / 3
    report(prof, "prefill 2048 (3 runs, wall per run)", wall)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        bench.decode_ms(1, 2048, 10)
        wall = (time.perf_counter() - t0) * 1e3 / 13
    report(prof, "decode b1 (13 steps, wall per step)", wall)


if __name__ == "__main__":
    main()
