"""The GPU's sustained matrix rate and copy rate: `python -m bench.sustained_rate --seconds 60 --out F.json`.

A long prefill is sustained work: an H200 at its 700 W limit settles at ~665-685 TFLOP/s after a
first second near 790 (../shared/PERFORMANCE.md), so long-prompt floors use the sustained rate,
measured in the same run. This runs bf16 8192^3 products back to back for `--seconds`, timing each
window of `WINDOW` products with CUDA events, and reports the first second's rate (burst), the
median over the last half of the run (sustained, the one floors use) and the lowest window; then a
1 GiB device-to-device copy (median of 50) for the weight-read part of a floor. JSON on stdout
(the last line) and in --out.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

N = 8192
WINDOW = 20  # products per timed window (~30 ms at 700 TFLOP/s)


def gemm_windows(seconds: float, device: torch.device) -> list[tuple[float, float]]:
    """(seconds since the start, TFLOP/s) of each window of back-to-back products."""
    a = torch.randn(N, N, device=device, dtype=torch.bfloat16)
    b = torch.randn(N, N, device=device, dtype=torch.bfloat16)
    out = torch.empty(N, N, device=device, dtype=torch.bfloat16)
    torch.matmul(a, b, out=out)
    torch.cuda.synchronize(device)
    rows, t0 = [], time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(WINDOW):
            torch.matmul(a, b, out=out)
        end.record()
        end.synchronize()
        rows.append((time.perf_counter() - t0, WINDOW * 2 * N**3 / (start.elapsed_time(end) * 1e-3) / 1e12))
    return rows


def copy_tbps(device: torch.device, reps: int = 50) -> float:
    src = torch.empty(2**30 // 2, device=device, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    times = []
    for _ in range(reps + 5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return 2 * src.numel() * 2 / (statistics.median(times[5:]) * 1e-3) / 1e12  # read + write


def summarize(rows: list[tuple[float, float]]) -> dict:
    """burst: the first second; sustained: the median of the last half; min: the slowest window."""
    end = rows[-1][0]
    burst = [r for t, r in rows if t <= 1.0] or [rows[0][1]]
    late = [r for t, r in rows if t >= end / 2] or [rows[-1][1]]
    return {"burst_tflops": statistics.median(burst), "sustained_tflops": statistics.median(late),
            "min_window_tflops": min(r for _, r in rows), "seconds": end, "windows": len(rows)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args()
    device = torch.device("cuda")
    rows = gemm_windows(a.seconds, device)
    result = {**summarize(rows), "copy_tbps": copy_tbps(device), "gpu": torch.cuda.get_device_name(device),
              "trace": [[round(t, 2), round(r, 1)] for t, r in rows[:: max(1, len(rows) // 120)]]}
    if a.out is not None:
        a.out.write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "trace"}))


if __name__ == "__main__":
    main()
