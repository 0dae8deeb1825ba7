"""Where a step's time goes on the GPU: `python bench/gpu_profile.py` profiles one 2,048-token
prefill and decode steps at batch 1 and at batch 64 (2,048-token contexts) of the Llama-3-8B shape
through ModelRunner (triton backend, CUDA graphs) with torch.profiler, and prints the kernels by
total device time and the gap between wall time and device time (host overhead, launches, syncs).
`--prefills 1x8192,4x2048` profiles only those prefill steps (prompts x tokens each), after the
server's start-up warm-up. `--kv-cache-dtype fp8` runs the same steps over an 8-bit pool;
`--decode-only` skips the prefill step."""
from __future__ import annotations

import argparse
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


def report(prof, label: str, wall_ms: float, runs: int) -> None:
    # Kernels only: CPU-side ops also carry the device time of the kernels they launched.
    events = [e for e in prof.key_averages() if e.device_type == DeviceType.CUDA and e.device_time_total > 0]
    events.sort(key=lambda e: e.device_time_total, reverse=True)
    total = sum(e.device_time_total for e in events) / 1e3 / runs
    print(f"\n== {label}: wall {wall_ms:.2f} ms, kernels {total:.2f} ms per run")
    for e in events[:24]:
        print(f"  {e.device_time_total / 1e3 / runs:8.3f} ms  {e.count / runs:6.1f}x  {e.key[:90]}")
    idle_report(prof, runs)


def busy_and_gaps(kernels: list[tuple[float, float, str]]) -> tuple[float, list[tuple[float, str, str]], float]:
    """Kernels as (start, end, name), sorted by start (overlaps allowed) -> (time covered by at
    least one kernel, the idle gaps as (length, kernel before, kernel after), the last end)."""
    gaps, busy, end = [], 0.0, kernels[0][0]
    prev = ""
    for start, stop, name in kernels:
        if start > end:
            gaps.append((start - end, prev, name))
        busy += max(0.0, stop - max(start, end))
        end, prev = max(end, stop), name
    return busy, gaps, end


def idle_report(prof, runs: int) -> None:
    """The device's idle time between its kernels, and the largest gaps with their neighbours:
    what the host (launches, Python, syncs) costs beyond the kernels."""
    kernels = sorted((e.time_range.start, e.time_range.end, e.name) for e in prof.events()
                     if e.device_type == DeviceType.CUDA)
    if not kernels:
        return
    busy, gaps, end = busy_and_gaps(kernels)
    span = (end - kernels[0][0]) / 1e3
    idle = sum(g for g, _, _ in gaps) / 1e3
    print(f"  device span {span / runs:.2f} ms per run: busy {busy / 1e3 / runs:.2f}, idle {idle / runs:.2f} "
          f"in {len(gaps) / runs:.0f} gaps per run")
    for gap, before, after in sorted(gaps, reverse=True)[:8]:
        print(f"    gap {gap:8.1f} us  after {before[:45]}  before {after[:45]}")


def profile_prefills(bench: Bench, cases: list[tuple[int, int]]) -> None:
    """Each (prompts, tokens) case: one step of that many new prompts, profiled over 3 runs."""
    for num_prompts, num_tokens in cases:
        bench.prefill_ms(num_tokens, 1, num_prompts)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            t0 = time.perf_counter()
            bench.prefill_ms(num_tokens, 1, num_prompts)
            wall = (time.perf_counter() - t0) * 1e3 / 3
        report(prof, f"prefill {num_prompts} x {num_tokens} (3 runs, wall per run)", wall, 3)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--prefills", default=None,
                   help="only these prefill steps, e.g. 1x8192,4x2048 (prompts x tokens); no decode")
    p.add_argument("--kv-cache-dtype", default="auto", help="the pool's dtype (--kv-cache-dtype of ttft serve)")
    p.add_argument("--decode-only", action="store_true", help="profile the decode steps only")
    a = p.parse_args()
    source = load_model_source(MODEL, seed=0)
    runner = ModelRunner.build(source, "cuda", torch.bfloat16, FIXED_BLOCKS, BLOCK_SIZE, max_num_batched_tokens=8192,
                               max_num_seqs=64, attention_backend="triton", enforce_eager=False,
                               max_model_len=8192, kv_cache_dtype=a.kv_cache_dtype)
    bench = Bench(runner, source.config.vocab_size)
    if a.prefills:
        runner.warm_thread()  # as the server: cuDNN plans and cuBLAS kernels before the first step
        profile_prefills(bench, [tuple(int(x) for x in case.split("x")) for case in a.prefills.split(",")])
        return
    print(f"KV pool: --kv-cache-dtype {a.kv_cache_dtype}")
    bench.prefill_ms(2048, 2)
    bench.decode_ms(1, 2048, 3)
    if not a.decode_only:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            t0 = time.perf_counter()
            bench.prefill_ms(2048, 1)
            wall = (time.perf_counter() - t0) * 1e3 / 3
        report(prof, "prefill 2048 (3 runs, wall per run)", wall, 3)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        bench.decode_ms(1, 2048, 10)
        wall = (time.perf_counter() - t0) * 1e3 / 13
    report(prof, "decode b1 (13 steps, wall per step)", wall, 13)
    bench.decode_ms(64, 2048, 3)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        bench.decode_ms(64, 2048, 10)
        wall = (time.perf_counter() - t0) * 1e3 / 13
    report(prof, "decode b64 at 2,048 (13 steps, wall per step)", wall, 13)


if __name__ == "__main__":
    main()
