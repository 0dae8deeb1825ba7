"""The CPU decode kernel's build against an earlier one, on the same inputs in one process:

    python -m lab.cpu_decode_kernel_ab OLD_MODULE.py [--seqs 4] [--context 1200] [--reps 30]

OLD_MODULE.py: a copy of gpu_stage/attention/cpu_decode_kernel.py at another commit (`git show
REV:gpu_stage/attention/cpu_decode_kernel.py > old.py`). Both are built (or loaded from their
caches; the build's seconds are printed), then a decode over SmolLM2's shape (9 query heads, 3 kv
heads, head size 64) of `--seqs` sequences at `--context` tokens from a random paged pool runs
`--reps` x 30 calls (one step's layers) alternately, at 1 and at 2 threads: the median step ms of
each, and the largest relative difference of their outputs.
"""
from __future__ import annotations

import argparse
import importlib.util
import statistics
import time

import torch

from gpu_stage.attention import cpu_decode_kernel as new


def load(path: str):
    spec = importlib.util.spec_from_file_location("old_cpu_decode_kernel", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("old")
    p.add_argument("--seqs", type=int, default=4)
    p.add_argument("--context", type=int, default=1200)
    p.add_argument("--reps", type=int, default=30)
    a = p.parse_args()
    old = load(a.old)
    for name, module in (("old", old), ("new", new)):
        t0 = time.perf_counter()
        assert module.enable(), name
        print(f"{name}: built or loaded in {time.perf_counter() - t0:.2f} s")
    heads, kv_heads, dim, block = 9, 3, 64, 16
    blocks_per = -(-a.context // block)
    num_rows = 2 * (a.seqs * blocks_per + 1) * block  # keys then values (v_delta)
    rows = torch.randn(num_rows, kv_heads * dim)
    v_delta = num_rows // 2
    perm = torch.randperm(a.seqs * blocks_per) + 1
    k_rows = torch.cat([(perm[i * blocks_per:(i + 1) * blocks_per, None] * block + torch.arange(block)).reshape(-1)
                        [:a.context] for i in range(a.seqs)])
    lens = torch.full((a.seqs,), a.context, dtype=torch.int64)
    q = torch.randn(a.seqs, heads, dim)
    ref = old.paged_decode(q, rows, k_rows, lens, a.context, v_delta)
    out = new.paged_decode(q, rows, k_rows, lens, a.context, v_delta)
    print(f"largest relative difference: {((out - ref).abs().max() / ref.abs().max()).item():.2e}")
    for threads in (1, 2):
        torch.set_num_threads(threads)
        times: dict[str, list[float]] = {"old": [], "new": []}
        for rep in range(a.reps):  # alternately first: no order bias
            for name, module in ((("old", old), ("new", new)) if rep % 2 else (("new", new), ("old", old))):
                t0 = time.perf_counter()
                for _ in range(30):
                    module.paged_decode(q, rows, k_rows, lens, a.context, v_delta)
                times[name].append((time.perf_counter() - t0) * 1e3)
        print(f"{threads} thread(s): " + ", ".join(f"{n} {statistics.median(t):.2f} ms" for n, t in times.items()))


if __name__ == "__main__":
    main()
