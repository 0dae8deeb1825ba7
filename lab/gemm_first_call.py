"""What a matrix product costs the first time its row count is met: `python lab/gemm_first_call.py`.

cuBLAS picks a kernel per problem shape, and the first call at a new shape pays for that choice on
the host. For the Llama-3-8B products (qkv, o, gate_up, down) at row counts a prompt might have,
prints the wall time (synced, ms) of the first call and of the next one, and the sum over the four
products: what a prompt of a new length adds to its prefill (in layer 0, before the device is busy).
`--warm STEP`: first run every product at the row counts gpu_stage.tuning.gemm_warmup warms with that step,
then measure 24 random row counts (none a multiple of 8): whether the warm-up covers them.
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336)}
ROWS = (2048, 2150, 2151, 2152, 2160, 2176, 2200, 2240, 2304, 2333, 2400, 2432, 2560, 3333, 4095, 4096)


def wall_ms(fn) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--warm", type=int, default=0, help="row step of a warm-up sweep first (0: none)")
    a = p.parse_args()
    dt = torch.bfloat16
    weights = {k: torch.randn(n, kk, device="cuda", dtype=dt) for k, (n, kk) in SHAPES.items()}
    xs = {kk: torch.randn(8192, kk, device="cuda", dtype=dt) for kk in {kk for _, kk in SHAPES.values()}}
    rows = ROWS
    if a.warm:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from gpu_stage.tuning.gemm_warmup import row_counts

        t0 = time.perf_counter()
        for m in row_counts(8192, a.warm):
            for w in weights.values():
                F.linear(xs[w.shape[1]][:m], w)
        torch.cuda.synchronize()
        print(f"warm-up sweep, row step {a.warm}: {time.perf_counter() - t0:.2f} s")
        rng = random.Random(0)
        rows = sorted(m for m in (rng.randrange(1, 8192) for _ in range(40)) if m % 8)[:24]
    print(f"{'rows':>6s} " + " ".join(f"{k:>15s}" for k in SHAPES) + f" {'sum first - again':>18s}  (ms)")
    for m in rows:
        cells, extra = [], 0.0
        for name, w in weights.items():
            x = xs[w.shape[1]][:m]
            first, again = wall_ms(lambda: F.linear(x, w)), wall_ms(lambda: F.linear(x, w))
            cells.append(f"{first:6.2f} / {again:5.2f}")
            extra += first - again
        print(f"{m:6d} " + " ".join(f"{c:>15s}" for c in cells) + f" {extra:18.2f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
