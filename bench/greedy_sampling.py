"""Greedy sampling of a step's logits on the GPU: the torch path against the fused Triton kernels
(gpu_stage/kernels/greedy.py), both through Sampler.start as the runner calls it.

    python3 bench/greedy_sampling.py [--vocab 128256] [--rows 1 8 32 64 128 256] [--reps 200]

For each row count: the device time of one start() (CUDA events around `reps` calls queued behind
a sleeping kernel, so that the host's launches never leave the device waiting), the host time it
takes to queue one (median, wall clock), and whether the two paths agree on the ids and ok flags. Logits are float32, as the decode graphs write them. Prints one JSON object.
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

from gpu_stage.sampler import Sampler, SamplingRow, SamplingTensors  # noqa: E402
from stages.sampling import SamplingParams  # noqa: E402


def _device_us(fn, reps: int) -> float:
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(50_000_000)  # ~25 ms at ~2 GHz: the launches below queue up behind it
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / reps


def _host_us(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times) / 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--vocab", type=int, default=128256)
    p.add_argument("--rows", type=int, nargs="+", default=[1, 8, 32, 64, 128, 256])
    p.add_argument("--reps", type=int, default=200)
    a = p.parse_args()
    device = torch.device("cuda")
    report = {"gpu": torch.cuda.get_device_name(0), "vocab": a.vocab, "rows": []}
    for num_rows in a.rows:
        gen = torch.Generator().manual_seed(num_rows)
        logits = (torch.randn(num_rows, a.vocab, generator=gen) * 4).to(device)
        rows = [SamplingRow(SamplingParams(temperature=0.0), [], [], None)] * num_rows
        tensors = SamplingTensors.build(rows, device, a.vocab)
        entry = {"rows": num_rows}
        outs = {}
        for name, sampler in (("torch", Sampler()), ("fused", Sampler(fused_greedy=True))):
            def run(s=sampler):
                return s.start(logits, rows, tensors)

            entry[f"{name}_device_us"] = round(_device_us(run, a.reps), 2)
            entry[f"{name}_host_us"] = round(_host_us(run, a.reps), 2)
            outs[name] = sampler.finish(run())
        entry["same_ids"] = outs["torch"].token_ids == outs["fused"].token_ids
        entry["same_errors"] = outs["torch"].errors == outs["fused"].errors
        report["rows"].append(entry)
        print(entry, file=sys.stderr)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
