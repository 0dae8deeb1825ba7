"""What padding a packed layer product up to its row bucket costs on this CPU:

    python -m lab.cpu_row_buckets [--threads 2] [--reps 7] [--out DIR]

gpu_stage/model/cpu_ops.py runs a layer's oneDNN product at LAYER_ROW_BUCKETS (every count to 8,
then padded up) so that its primitives are built once at start-up. For SmolLM2's gate_up (576 ->
3,072, float32, 20 weight copies cycled so they are cold as in a step) at the row counts that pad,
times the product at its exact row count and padded to its bucket, interleaved (exact, padded,
exact: the better exact counts), median of --reps passes. Prints a table; with --out, writes
DIR/row_buckets.json.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from gpu_stage.model.cpu_ops import row_bucket

ROWS = (9, 13, 17, 25, 33, 49)  # the first count of each padded bucket
IN_FEATURES, OUT_FEATURES, COPIES = 576, 3072, 20


def time_us(packed: list[torch.Tensor], rows: int, run_rows: int, reps: int) -> float:
    x = torch.randn(rows, IN_FEATURES)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for p in packed:
            xx = F.pad(x, (0, 0, 0, run_rows - rows)) if run_rows > rows else x
            torch.ops.mkldnn._linear_pointwise(xx, p, None, "none", [], "")[:rows]
        times.append((time.perf_counter() - t0) / len(packed) * 1e6)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    packed = [torch.ops.mkldnn._reorder_linear_weight(torch.randn(OUT_FEATURES, IN_FEATURES), 8)
              for _ in range(COPIES)]
    rows_out = []
    print("| rows | bucket | exact us | padded us | padded / exact |\n|---|---|---|---|---|")
    for rows in ROWS:
        bucket = row_bucket(rows)
        for run_rows in (rows, bucket):  # warm both primitives
            time_us(packed[:2], rows, run_rows, 1)
        exact = time_us(packed, rows, rows, args.reps)
        padded = time_us(packed, rows, bucket, args.reps)
        exact = min(exact, time_us(packed, rows, rows, args.reps))
        rows_out.append({"rows": rows, "bucket": bucket, "exact_us": exact, "padded_us": padded})
        print(f"| {rows} | {bucket} | {exact:.0f} | {padded:.0f} | {padded / exact:.2f} |")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "row_buckets.json").write_text(json.dumps(
            {"threads": args.threads, "reps": args.reps, "product": "gate_up 576->3072 fp32", "rows": rows_out},
            indent=1))


if __name__ == "__main__":
    main()
