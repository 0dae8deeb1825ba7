"""Does the weight's layout change cuBLAS's speed for few-row products? `python lab/gemm_layout.py`

A 64-stream decode step's q/k/v and o products read their weights at ~3.0 and ~2.8 TB/s against
~3.9 for gate/up (bench/results/20261130-NVIDIA-H200/s7-profile-b64-a6e7641). The model stores each
weight [out, in] and computes `F.linear(x, w)` (cuBLAS "TN"). For each product of the Llama-3-8B
shape at 1-128 rows this times that against `torch.mm(x, wt)` with `wt` = w.t() stored contiguous
([in, out], "NN"). Each call reads one of 8 copies of the weight in turn, so the 50 MB L2 holds none
of them, as in a real step, and the 8 calls are one CUDA graph, as in a decode step (eager, a
small product's launch costs more than its kernel). Also "TN" under cuBLASLt (torch's
`preferred_blas_library`). Prints us per call and the weight bytes read per second (TB/s).
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.cuda_timing import median_ms  # noqa: E402

HIDDEN, INTER, QKV, VOCAB = 4096, 14336, 6144, 128256
PRODUCTS = {"qkv": (QKV, HIDDEN), "o": (HIDDEN, HIDDEN), "gate_up": (2 * INTER, HIDDEN),
            "down": (HIDDEN, INTER), "lm_head": (VOCAB, HIDDEN)}
ROWS = (1, 16, 32, 48, 64, 96, 128)
COPIES = 8


def graphed(fn: Callable[[], None]) -> Callable[[], None]:
    """`fn` captured once in a CUDA graph -> a callable that replays it."""
    fn()  # cuBLAS picks and warms its kernels outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def main() -> None:
    dt = torch.bfloat16
    print(f"{'product':>8s} {'rows':>5s} {'TN us':>8s} {'NN us':>8s} {'Lt us':>8s} {'TN TB/s':>8s} {'NN TB/s':>8s}"
          f" {'Lt TB/s':>8s}", flush=True)
    for name, (n, k) in PRODUCTS.items():
        copies = COPIES if n * k * 2 * COPIES < 12e9 else 2
        ws = [torch.randn(n, k, device="cuda", dtype=dt) / k**0.5 for _ in range(copies)]
        wts = [w.t().contiguous() for w in ws]
        for rows in ROWS:
            x = torch.randn(rows, k, device="cuda", dtype=dt)

            def tn() -> None:
                for w in ws:
                    F.linear(x, w)

            def nn() -> None:
                for wt in wts:
                    torch.mm(x, wt)

            assert torch.allclose(F.linear(x, ws[0]).float(), torch.mm(x, wts[0]).float(), atol=1e-2, rtol=1e-2)
            t_tn, t_nn = median_ms(graphed(tn)) * 1e3 / copies, median_ms(graphed(nn)) * 1e3 / copies
            torch.backends.cuda.preferred_blas_library("cublaslt")
            try:
                t_lt = median_ms(graphed(tn)) * 1e3 / copies
            finally:
                torch.backends.cuda.preferred_blas_library("cublas")
            gb = n * k * 2 / 1e9
            print(f"{name:>8s} {rows:5d} {t_tn:8.1f} {t_nn:8.1f} {t_lt:8.1f} {gb / t_tn * 1e3:8.2f} "
                  f"{gb / t_nn * 1e3:8.2f} {gb / t_lt * 1e3:8.2f}", flush=True)
        ws.clear()
        wts.clear()
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
