"""Does cuBLAS add the residual for free? `python lab/gemm_epilogue.py`

For the o and down products of the Llama-3-8B shape at 1, 64, 2,048 and 8,192 rows, times (CUDA
events, median of 20) `F.linear(x, w)` alone, `torch.addmm(residual, x, w.t())` (the residual add in
the GEMM's epilogue, beta = 1), and the fused add + RMSNorm kernel against the plain RMSNorm (what
the next norm costs with and without the add). Prints microseconds per call.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.cuda_timing import median_ms  # noqa: E402
from gpu_stage.kernels.rms_norm import add_rms_norm, rms_norm  # noqa: E402

HIDDEN, INTER = 4096, 14336


def time_us(fn) -> float:
    return median_ms(fn) * 1e3


def main() -> None:
    dt = torch.bfloat16
    norm_w = torch.randn(HIDDEN, device="cuda", dtype=dt)
    print(f"{'rows':>6s} {'product':>6s} {'linear':>9s} {'addmm':>9s} {'add+norm':>9s} {'norm':>9s}  (us)")
    for rows in (1, 64, 2048, 8192):
        for name, k in (("o", HIDDEN), ("down", INTER)):
            x = torch.randn(rows, k, device="cuda", dtype=dt)
            w = torch.randn(HIDDEN, k, device="cuda", dtype=dt) / k**0.5
            res = torch.randn(rows, HIDDEN, device="cuda", dtype=dt)
            out = F.linear(x, w)
            lin = time_us(lambda: F.linear(x, w))
            fused = time_us(lambda: torch.addmm(res, x, w.t()))
            add_norm = time_us(lambda: add_rms_norm(out, res, norm_w, 1e-5))
            norm = time_us(lambda: rms_norm(out, norm_w, 1e-5))
            err = (torch.addmm(res, x, w.t()).float() - (res.float() + out.float())).abs().max().item()
            print(f"{rows:6d} {name:>6s} {lin:9.1f} {fused:9.1f} {add_norm:9.1f} {norm:9.1f}  max|diff| {err:.3g}")


if __name__ == "__main__":
    main()
