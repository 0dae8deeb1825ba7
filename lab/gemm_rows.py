"""Is a tall product faster in row blocks? `python lab/gemm_rows.py`

A prefill step of 8,192 tokens ran its products ~9% slower per row than a 2,048-token step
(profile of 2026-11-30: cuBLAS picks other kernels at 8,192 rows). For each product of the
Llama-3-8B shape (q/k/v, o, gate/up, down) at 2,048-8,192 rows, times (CUDA events, median of 10)
`F.linear(x, w)` whole against the same product in row blocks of 1,024 / 2,048 / 4,096 rows
written into one output (`torch.mm(..., out=)`), and whole under cuBLASLt. Prints TFLOP/s.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.cuda_timing import median_ms  # noqa: E402

HIDDEN, INTER, QKV = 4096, 14336, 6144
PRODUCTS = {"qkv": (QKV, HIDDEN), "o": (HIDDEN, HIDDEN), "gate_up": (2 * INTER, HIDDEN), "down": (HIDDEN, INTER)}
ROWS = (2048, 3072, 4096, 6144, 8192)
BLOCKS = (1024, 2048, 4096)


def in_blocks(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, block: int) -> None:
    wt = w.t()
    for r in range(0, x.shape[0], block):
        torch.mm(x[r:r + block], wt, out=out[r:r + block])


def main() -> None:
    dt = torch.bfloat16
    print(f"{'product':>8s} {'rows':>6s} {'whole':>7s} " + " ".join(f"{'b' + str(b):>7s}" for b in BLOCKS)
          + f" {'lt':>7s}  (TFLOP/s)", flush=True)
    for name, (n, k) in PRODUCTS.items():
        w = torch.randn(n, k, device="cuda", dtype=dt) / k**0.5
        for rows in ROWS:
            x = torch.randn(rows, k, device="cuda", dtype=dt)
            out = torch.empty(rows, n, device="cuda", dtype=dt)
            flop = 2 * rows * n * k

            def rate(ms: float) -> str:
                return f"{flop / ms / 1e9:7.0f}"

            cells = [rate(median_ms(lambda: F.linear(x, w), 10))]
            for block in BLOCKS:
                cells.append(rate(median_ms(lambda: in_blocks(x, w, out, block), 10)) if block < rows else f"{'-':>7s}")
            torch.backends.cuda.preferred_blas_library("cublaslt")
            cells.append(rate(median_ms(lambda: F.linear(x, w), 10)))
            torch.backends.cuda.preferred_blas_library("cublas")
            print(f"{name:>8s} {rows:6d} " + " ".join(cells), flush=True)


if __name__ == "__main__":
    main()
