"""Where an eager step's host time goes: `python lab/gpu_host_profile.py`.

An eager decode step at batch 1 takes ~25 ms of wall time on the H200 host against ~4.7 ms as a CUDA
graph (bench/gpu_prefill.py), and the eager 2,048-token prefill's wall exceeds its kernels by ~3 ms.
This prints, for the Llama-3-8B shape through ModelRunner (Triton backend, no graphs):
  * each op of a decoder layer launched alone: host microseconds per call (launch cost only);
  * the step's timeline: wall, host time before the first kernel, device busy and idle, time after
    the last kernel, and the CUDA runtime calls the host made (count, total) from torch.profiler;
  * cProfile of eager decode steps: the Python functions by own time.
"""
from __future__ import annotations

import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.autograd import DeviceType
from torch.autograd.profiler import record_function
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.gpu_prefill import BLOCK_SIZE, FIXED_BLOCKS, MODEL, Bench  # noqa: E402
from bench.gpu_profile import busy_and_gaps  # noqa: E402
from gpu_stage.loaders import load_model_source  # noqa: E402
from gpu_stage.model_runner import ModelRunner  # noqa: E402


def host_us(fn, calls: int = 200) -> float:
    """Host microseconds per call of fn (the device may lag: synced once every 50 calls)."""
    fn()
    torch.cuda.synchronize()
    total = 0.0
    for i in range(calls):
        t0 = time.perf_counter()
        fn()
        total += time.perf_counter() - t0
        if i % 50 == 49:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return total / calls * 1e6


def op_costs(runner: ModelRunner) -> None:
    """Launch cost of each piece of a decode layer at batch 1, each alone."""
    model = runner.model
    layer, ops = model.layers[0], model.ops
    c = model.config
    x = torch.randn(1, c.hidden_size, device="cuda", dtype=torch.bfloat16)
    res = torch.randn_like(x)
    wide = torch.randn(1, 2 * c.intermediate_size, device="cuda", dtype=torch.bfloat16)
    w = layer.input_layernorm.weight
    rows = {
        "torch.empty [1, 4096]": lambda: torch.empty_like(x),
        "F.linear qkv (cuBLAS)": lambda: F.linear(x, layer.qkv_weight),
        "ops.linear qkv": lambda: ops.linear(x, layer.qkv_weight),
        "ops.rms_norm": lambda: ops.rms_norm(x, w, 1e-5),
        "ops.add_rms_norm": lambda: ops.add_rms_norm(x, res, w, 1e-5),
        "ops.silu_and_mul": lambda: ops.silu_and_mul(wide),
        "ops.gate_up_silu": lambda: ops.gate_up_silu(x, layer.gate_up_weight),
        "tensor.split + 3 views": lambda: [t.view(1, -1, 128) for t in torch.randn(1, 6144, device="cuda").split(
            [4096, 1024, 1024], dim=-1)],
    }
    print("\n== host us per call, each op alone (decode shapes, batch 1)")
    for name, fn in rows.items():
        print(f"  {host_us(fn):8.1f} us  {name}")


def timeline(prof, label: str) -> None:
    """Per 'step' range: wall, host lead before the first kernel, device busy/idle, tail."""
    events = list(prof.events())
    steps = sorted((e.time_range.start, e.time_range.end) for e in events
                   if e.name == "step" and e.device_type == DeviceType.CPU)
    kernels = sorted((e.time_range.start, e.time_range.end, e.name) for e in events
                     if e.device_type == DeviceType.CUDA)
    print(f"\n== {label}: {len(steps)} steps")
    for s0, s1 in steps[-3:]:
        ks = [k for k in kernels if s0 <= k[0] <= s1]
        if not ks:
            continue
        busy, gaps, end = busy_and_gaps(ks)
        idle = sum(g for g, _, _ in gaps)
        print(f"  wall {(s1 - s0) / 1e3:7.2f} ms | host before first kernel {(ks[0][0] - s0) / 1e3:6.2f} | "
              f"busy {busy / 1e3:7.2f} | idle inside {idle / 1e3:6.2f} in {len(gaps)} gaps | "
              f"after last kernel {(s1 - end) / 1e3:6.2f}")
        for gap, before, after in sorted(gaps, reverse=True)[:4]:
            print(f"      gap {gap:7.1f} us  after {before[:40]}  before {after[:40]}")
    calls = {}
    for e in prof.key_averages():
        if e.device_type == DeviceType.CPU and (e.key.startswith("cuda") or e.key.startswith("cu")):
            calls[e.key] = (e.count, e.cpu_time_total)
    n = max(1, len(steps))
    print("  CUDA runtime/driver calls per step: count, host ms")
    for key, (count, total) in sorted(calls.items(), key=lambda kv: -kv[1][1])[:10]:
        print(f"    {count / n:7.1f}  {total / 1e3 / n:7.3f} ms  {key}")


def profiled(label: str, fn) -> None:
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
    timeline(prof, label)


def main() -> None:
    source = load_model_source(MODEL, seed=0)
    runner = ModelRunner.build(source, "cuda", torch.bfloat16, FIXED_BLOCKS, BLOCK_SIZE, max_num_batched_tokens=8192,
                               max_num_seqs=64, attention_backend="triton", enforce_eager=True, max_model_len=8192)
    bench = Bench(runner, source.config.vocab_size)
    original = bench.execute

    def traced(*args, **kwargs):
        with record_function("step"):
            return original(*args, **kwargs)

    bench.execute = traced
    op_costs(runner)
    bench.prefill_ms(2048, 1)
    bench.decode_ms(1, 2048, 3)
    print("\n== eager step wall (median ms): prefill 2048 %.2f, decode b1 %.2f" % (
        sorted(bench.prefill_ms(2048, 3))[1], sorted(bench.decode_ms(1, 2048, 9))[4]))
    profiled("eager prefill 2048", lambda: bench.prefill_ms(2048, 1))
    profiled("eager decode b1 at 2,048", lambda: bench.decode_ms(1, 2048, 5))
    pr = cProfile.Profile()
    pr.enable()
    bench.decode_ms(1, 2048, 20)
    pr.disable()
    out = io.StringIO()
    pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(30)
    print("\n== cProfile, 24 eager decode steps at batch 1, by own time")
    print(out.getvalue())


if __name__ == "__main__":
    main()
