"""The skinny product (gpu_stage/kernels/skinny_gemm.py) against cuBLAS at the Llama-3.1-8B products:

    python lab/skinny_gemm_gpu.py --out OUT_DIR [--rows 1 8 32 64 128 256 512] [--products qkv o ...]
    TRITON_INTERPRET=1 python lab/skinny_gemm_gpu.py --out OUT_DIR --dry-run   # CPU: tiny shapes

For each product (qkv 4096->6144, o 4096->4096, gate_up 4096->28672 with its SiLU-and-mul, down
14336->4096, lm_head 4096->128256) and row count: cuBLAS's time (F.linear; for gate_up also with the
activation kernel after it, the path the fused kernel replaces) and the kernel's under a few
configurations (the heuristic served today, split flipped, another BLOCK_N), each as the weight's
bytes per second and as a ratio to the device copy rate measured in the same run
(bench/sustained_rate.copy_tbps, the rate the floors use). Every product is timed on enough copies
of its weight to exceed three times the L2, cycled inside one CUDA graph (a Triton launch's host cost
would otherwise be timed), median of the replays over CUDA events. Also checked on the GPU: the
kernel's error against a float32 reference, cuBLAS's beside it, and the bits of a row alone against
the same row in a batch, split or not (the batch invariance the interpreter tests show).
Writes skinny_gemm.json (every timing; `tuned`: the fastest configuration per (bucket, N, K), in
skinny_configs.TUNED's terms) and skinny_gemm.md. Sized to finish in under 3 minutes on an H100;
past --budget-s only the served configuration is timed.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PRODUCTS = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336),
            "lm_head": (128256, 4096)}  # name -> weight [N, K]
DRY_PRODUCTS = {"qkv": (96, 64), "o": (64, 64), "gate_up": (224, 64), "down": (64, 112), "lm_head": (400, 64)}
ROWS = (1, 8, 32, 64, 128, 256, 512)
DRY_ROWS = (1, 8, 40)
INVARIANCE_ROWS = (8, 128)  # split and not, on a GPU (dry runs: 8)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True, help="folder for skinny_gemm.json and skinny_gemm.md")
    p.add_argument("--rows", type=int, nargs="+", default=None, help=f"row counts (default {' '.join(map(str, ROWS))})")
    p.add_argument("--products", nargs="+", choices=sorted(PRODUCTS), default=None, help="default: all")
    p.add_argument("--reps", type=int, default=15, help="timed graph replays per configuration")
    p.add_argument("--budget-s", type=float, default=150.0, help="past it, only the served configuration is timed")
    p.add_argument("--dry-run", action="store_true", help="tiny shapes on the CPU (with TRITON_INTERPRET=1): the "
                                                          "script's path end to end, wall-clock times")
    args = p.parse_args(argv)
    if any(r < 1 or r > 512 for r in args.rows or ()):
        p.error("--rows: each must be in 1..512 (the kernel's range)")
    return args


class Timer:
    """Microseconds per call of each of `calls` (one per weight copy): replays of a CUDA graph of
    them all on a GPU, wall-clock time on the CPU (dry runs)."""

    def __init__(self, device: torch.device, reps: int) -> None:
        self.device, self.reps = device, reps

    def us(self, calls: list[Callable[[], object]]) -> float:
        for call in calls:  # compiles, plans, and touches every copy once
            call()
        if self.device.type != "cuda":
            t0 = time.perf_counter()
            for call in calls:
                call()
            return (time.perf_counter() - t0) * 1e6 / len(calls)
        from gpu_stage.graph_capture import capturing

        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with capturing(graph):
            for call in calls:
                call()
        graph.replay()
        times = []
        for _ in range(self.reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3 / len(calls))
        del graph
        return statistics.median(times)


def copy_rate_tbps(device: torch.device) -> float:
    if device.type == "cuda":
        from bench.sustained_rate import copy_tbps

        return copy_tbps(device)
    src = torch.empty(2**24, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    t0 = time.perf_counter()
    dst.copy_(src)
    return 2 * src.numel() * 2 / (time.perf_counter() - t0) / 1e12


def name_of(cfg) -> str:
    return (f"m{cfg.block_m}n{cfg.block_n}k{cfg.block_k}c{cfg.chunk_k}{'-split' if cfg.split else ''}"
            f"-w{cfg.num_warps}s{cfg.num_stages}")


def candidates(rows: int, n: int, k: int, silu: bool, full: bool) -> list:
    """The served configuration first; with `full`, split flipped and the other BLOCK_N (the layout
    kept: every candidate gives the same bits)."""
    from gpu_stage.kernels.skinny_configs import config_for

    served = config_for(rows, n, k, silu)
    out = [served]
    if full:
        if math.ceil(k / served.chunk_k) > 1:
            out.append(replace(served, split=not served.split))
        out.append(replace(served, block_n=128 if served.block_n <= 64 else 64))
    return out


def rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double(), ref.double()
    return float(torch.linalg.norm(out - ref) / torch.linalg.norm(ref))


def invariance(x: torch.Tensor, w: torch.Tensor, act: str) -> dict:
    """Row 3 alone against row 3 of the batch, and the batch split against not: the same bits?"""
    from gpu_stage.kernels.skinny_configs import config_for
    from gpu_stage.kernels.skinny_gemm import skinny_linear

    batch = skinny_linear(x, w, act=act)
    alone = skinny_linear(x[3:4].clone(), w, act=act)
    cfg = config_for(x.shape[0], w.shape[0], w.shape[1], act == "silu_mul")
    flipped = skinny_linear(x, w, act=act, config=replace(cfg, split=not cfg.split))
    again = skinny_linear(x, w, act=act)
    return {"row_alone_equals_batch": bool(torch.equal(alone[0], batch[3])),
            "split_equals_not": bool(torch.equal(flipped, batch)), "deterministic": bool(torch.equal(again, batch))}


def measure_product(name: str, n: int, k: int, rows_list: list[int], timer: Timer, copy_tbps: float,
                    l2_bytes: int, deadline: float, device: torch.device,
                    invariance_rows: tuple[int, ...]) -> tuple[list[dict], dict]:
    from gpu_stage.kernels import activation
    from gpu_stage.kernels.skinny_configs import rows_bucket
    from gpu_stage.kernels.skinny_gemm import skinny_linear

    dtype = torch.bfloat16
    silu = name == "gate_up"
    act = "silu_mul" if silu else "none"
    weight_bytes = n * k * 2
    gen = torch.Generator(device=device).manual_seed(n + k)
    num_copies = max(1, math.ceil(3 * l2_bytes / weight_bytes))
    weights = [(torch.randn(n, k, device=device, generator=gen) / k ** 0.5).to(dtype) for _ in range(num_copies)]
    xs = {r: torch.randn(r, k, device=device, generator=gen).to(dtype) for r in set(rows_list) | set(invariance_rows)}
    gbps = lambda us: weight_bytes / (us * 1e-6) / 1e9  # noqa: E731
    rows_out = []
    for rows in rows_list:
        x = xs[rows]
        if silu:
            ref = activation.silu_and_mul(F.linear(x.float(), weights[0].float()).to(dtype))
            cublas_out = activation.silu_and_mul(F.linear(x, weights[0]))
        else:
            ref, cublas_out = F.linear(x.float(), weights[0].float()), F.linear(x, weights[0])
        row = {"product": name, "n": n, "k": k, "rows": rows, "bucket": rows_bucket(max(rows, 2)),
               "weight_copies": num_copies, "cublas_us": timer.us([lambda w=w: F.linear(x, w) for w in weights])}
        if silu:
            row["cublas_act_us"] = timer.us([lambda w=w: activation.silu_and_mul(F.linear(x, w)) for w in weights])
        baseline = row.get("cublas_act_us", row["cublas_us"])  # what the model runs without the kernel
        row["cublas_gbps"] = round(gbps(row["cublas_us"]), 1)
        row["cublas_ratio_to_copy"] = round(gbps(row["cublas_us"]) / (copy_tbps * 1e3), 3)
        row["cublas_rel_err"] = rel(cublas_out, ref)
        row["skinny_rel_err"] = rel(skinny_linear(x, weights[0], act=act), ref)
        timings = {}
        for cfg in candidates(rows, n, k, silu, full=time.perf_counter() < deadline):
            timings[name_of(cfg)] = (cfg, timer.us([lambda w=w, c=cfg: skinny_linear(x, w, act=act, config=c)
                                                    for w in weights]))
        best_name = min(timings, key=lambda c: timings[c][1])
        served_name = next(iter(timings))
        best_us = timings[best_name][1]
        row.update({
            "skinny_us": {c: round(us, 2) for c, (_, us) in timings.items()}, "served": served_name,
            "served_us": round(timings[served_name][1], 2), "best": best_name, "best_us": round(best_us, 2),
            "best_config": asdict(timings[best_name][0]), "best_gbps": round(gbps(best_us), 1),
            "best_ratio_to_copy": round(gbps(best_us) / (copy_tbps * 1e3), 3),
            "served_speedup_vs_cublas": round(baseline / timings[served_name][1], 3),
            "best_speedup_vs_cublas": round(baseline / best_us, 3),
        })
        row["cublas_us"] = round(row["cublas_us"], 2)
        rows_out.append(row)
        print(json.dumps({c: row[c] for c in ("product", "rows", "cublas_us", "served_us", "best", "best_us",
                                              "best_ratio_to_copy")}), flush=True)
    checks = {str(r): invariance(xs[r], weights[0], act) for r in invariance_rows}
    del weights
    return rows_out, checks


def markdown(result: dict) -> str:
    lines = [f"# Skinny product against cuBLAS, {result['gpu']}", "",
             f"Copy rate {result['copy_tbps']:.2f} TB/s (read + write); ratios are weight bytes per second over it. "
             f"commit {result['commit']}, triton {result['triton']}, torch {result['torch']}.", "",
             "| product | rows | cuBLAS us | cuBLAS x copy | served us | best us | best x copy | best config | "
             "speedup (served, best) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        cublas = f"{r['cublas_us']}" + (f" ({r['cublas_act_us']:.2f} with act)" if "cublas_act_us" in r else "")
        lines.append(f"| {r['product']} | {r['rows']} | {cublas} | {r['cublas_ratio_to_copy']} | {r['served_us']} | "
                     f"{r['best_us']} | {r['best_ratio_to_copy']} | {r['best']} | {r['served_speedup_vs_cublas']}, "
                     f"{r['best_speedup_vs_cublas']} |")
    lines += ["", "Bits (row alone = in batch, split = not, twice the same): "
              + "; ".join(f"{p} {rows}: {'/'.join('yes' if v else 'NO' for v in c.values())}"
                          for p, checks in result["invariance"].items() for rows, c in checks.items())]
    if result["tuned"]:  # ready to paste into gpu_stage/kernels/skinny_configs.py
        lines += ["", "Faster than the served configuration (skinny_configs.TUNED entries):", "", "```python"]
        lines += [f"({key}): SkinnyConfig({', '.join(f'{f}={v}' for f, v in cfg.items())}),"
                  for key, cfg in result["tuned"].items()]
        lines += ["```"]
    return "\n".join(lines) + "\n"


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parents[1], timeout=10).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cuda = torch.cuda.is_available() and not args.dry_run
    if not cuda and not args.dry_run:
        print("skinny_gemm_gpu: no CUDA device (use --dry-run for the CPU path)", file=sys.stderr)
        return 2
    import triton

    from gpu_stage.kernels.skinny_configs import MIN_ROWS

    device = torch.device("cuda" if cuda else "cpu")
    products = DRY_PRODUCTS if args.dry_run else PRODUCTS
    rows_list = args.rows or list(DRY_ROWS if args.dry_run else ROWS)
    t0 = time.perf_counter()
    copy_tbps = copy_rate_tbps(device)
    l2_bytes = torch.cuda.get_device_properties(device).L2_cache_size if cuda else 0
    timer = Timer(device, args.reps if cuda else 1)
    result = {"gpu": torch.cuda.get_device_name(device) if cuda else "cpu (dry run)", "commit": commit(),
              "torch": torch.__version__, "triton": triton.__version__, "copy_tbps": round(copy_tbps, 3),
              "l2_bytes": l2_bytes, "rows": [], "invariance": {}}
    for name in args.products or list(products):
        n, k = products[name]
        rows, checks = measure_product(name, n, k, rows_list, timer, copy_tbps, l2_bytes, t0 + args.budget_s, device,
                                       (8,) if args.dry_run else INVARIANCE_ROWS)
        result["rows"] += rows
        result["invariance"][name] = checks
        if cuda:
            torch.cuda.empty_cache()
    # (bucket, N, K) -> the fastest where it is not the served one; one row is the gemv's, not the kernel's
    result["tuned"] = {f"{r['bucket']},{r['n']},{r['k']}": r["best_config"] for r in result["rows"]
                       if r["best"] != r["served"] and r["rows"] >= MIN_ROWS}
    result["seconds"] = round(time.perf_counter() - t0, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "skinny_gemm.json").write_text(json.dumps(result, indent=1))
    (args.out / "skinny_gemm.md").write_text(markdown(result))
    print(f"wrote {args.out}/skinny_gemm.json and skinny_gemm.md in {result['seconds']} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
