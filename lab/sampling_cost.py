"""Sampling a step's logits on the GPU: the sampler's torch path against its fused Triton kernels
(gpu_stage/kernels/sampling.py), both through Sampler.start as the runner calls it.

    python3 lab/sampling_cost.py [--vocab 128256] [--rows 1 8 32 64 128 256] [--reps 200]
        [--paths torch fused cached] [--kinds greedy temperature top_p top_p_top_k min_p penalties] [--kernels]
        [--device cuda|cpu] [--scale 4] [--peaked]

For each row count and kind of row (greedy; temperature 0.7; temperature with top_p 0.9; top_p and
top_k 50; min_p 0.05; repetition and frequency penalties), on each path (`torch`: the sampler's
torch ops; `fused`: its Triton kernels; `cached`: the kernels with the penalties' histories in a
PenaltyCache, as the runner serves them, instead of rebuilt from each row's 2,048 + 64 ids): the
device time of one start() (CUDA events around `reps` calls queued behind a sleeping kernel long
enough that the host's launches never leave the device waiting), the host time it takes to queue
one (median, wall clock), and whether each path gives the torch path's ids and errors (they draw the
same inverse CDF over the same kept tokens); with --kernels, each kernel's time on the other paths
(torch.profiler). `--device cpu` times the CPU serving path (wall time per call, torch and cached
paths). Logits are float32, as the decode graphs write them. Prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpu_stage.sampling.penalties import PenaltyCache  # noqa: E402
from gpu_stage.sampling.rows import SamplingRow, SamplingTensors  # noqa: E402
from gpu_stage.sampling.sampler import Sampler  # noqa: E402
from stages.sampling import SamplingParams  # noqa: E402


def _device_us(fn, reps: int) -> float:
    fn()
    if not torch.cuda.is_initialized():  # the CPU path: its calls compute before they return
        t0 = time.perf_counter_ns()
        for _ in range(reps):
            fn()
        return (time.perf_counter_ns() - t0) / 1e3 / reps
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(400_000_000)  # ~200 ms at ~2 GHz: the launches below queue up behind it
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / reps


def _host_us(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times) / 1e3


KINDS = {  # row kind -> its sampling parameters
    "greedy": {"temperature": 0.0},
    "temperature": {"temperature": 0.7},
    "top_p": {"temperature": 0.7, "top_p": 0.9},
    "top_p_top_k": {"temperature": 0.7, "top_p": 0.9, "top_k": 50},
    "min_p": {"temperature": 0.7, "min_p": 0.05},
    "penalties": {"temperature": 0.7, "repetition_penalty": 1.1, "frequency_penalty": 0.2},
}
PROMPT_LEN, OUTPUT_LEN = 2048, 64  # each row's history (the penalties read it)


def _kernel_us(fn, reps: int) -> dict[str, float]:
    """Each kernel's mean device time per call (torch.profiler), by kernel name."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    totals: dict[str, float] = {}
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            totals[event.name] = totals.get(event.name, 0.0) + event.device_time / reps
    return {name: round(us, 2) for name, us in sorted(totals.items(), key=lambda kv: -kv[1])}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--vocab", type=int, default=128256)
    p.add_argument("--rows", type=int, nargs="+", default=[1, 8, 32, 64, 128, 256])
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--paths", nargs="+", choices=["torch", "fused", "cached"], default=["torch", "fused", "cached"])
    p.add_argument("--kinds", nargs="+", choices=list(KINDS), default=list(KINDS))
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                   help="cpu: the CPU serving path (torch and cached paths only; wall time per call)")
    p.add_argument("--scale", type=float, default=4.0,
                   help="the logits' standard deviation (small: a flat distribution, whose top_p nucleus is wide)")
    p.add_argument("--peaked", action="store_true",
                   help="raise 30 logits of each row by 10, as a trained model's step (default: random)")
    p.add_argument("--kernels", action="store_true",
                   help="also each kernel's device time per call on the fused path (torch.profiler)")
    a = p.parse_args()
    device = torch.device(a.device)
    if device.type == "cpu":
        a.paths = [path for path in a.paths if path != "fused"]  # the kernels need the GPU
    name = torch.cuda.get_device_name(0) if device.type == "cuda" else f"cpu ({torch.get_num_threads()} threads)"
    report = {"device": name, "vocab": a.vocab, "scale": a.scale, "peaked": a.peaked, "rows": []}
    for num_rows in a.rows:
        gen = torch.Generator().manual_seed(num_rows)
        logits = torch.randn(num_rows, a.vocab, generator=gen) * a.scale
        if a.peaked:
            logits[:, :30] += 10
        logits = logits.to(device)
        entry = {"rows": num_rows}
        for kind in a.kinds:
            params = KINDS[kind]
            history = torch.randint(0, a.vocab, (num_rows, PROMPT_LEN + OUTPUT_LEN), generator=gen).tolist()
            outs = {}
            for path in a.paths:
                cache = PenaltyCache(a.vocab, device) if path == "cached" else None
                rows = [SamplingRow(SamplingParams(**params), h[:PROMPT_LEN], h[PROMPT_LEN:],
                                    torch.Generator().manual_seed(i)) for i, h in enumerate(history)]
                if cache is not None:
                    for i, row in enumerate(rows):
                        if row.params.needs_penalties:
                            row.penalty_slot = cache.slot(str(i), row.prompt_token_ids, row.output_token_ids)
                tensors = SamplingTensors.build(rows, device, a.vocab)  # the uniforms are drawn once here
                sampler = Sampler(fused=path == "fused" or (path == "cached" and device.type == "cuda"),
                                  penalties=cache)

                def run(s=sampler, rows=rows, tensors=tensors):
                    return s.start(logits, rows, tensors)

                entry[f"{kind}_{path}_device_us"] = round(_device_us(run, a.reps), 2)
                entry[f"{kind}_{path}_host_us"] = round(_host_us(run, a.reps), 2)
                outs[path] = sampler.finish(run())
                if a.kernels and path != "torch":
                    entry[f"{kind}_{path}_kernels_us"] = _kernel_us(run, a.reps)
            for path in outs:
                if path != "torch" and "torch" in outs:
                    entry[f"{kind}_{path}_same_ids"] = outs["torch"].token_ids == outs[path].token_ids
                    entry[f"{kind}_{path}_same_errors"] = outs["torch"].errors == outs[path].errors
        report["rows"].append(entry)
        print(entry, file=sys.stderr)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
