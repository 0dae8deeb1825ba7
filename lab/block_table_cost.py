"""What a step's block tables cost at long max_model_len: `python -m lab.block_table_cost [--device cuda]`.

StepInputs stages a CUDA-graph step with block tables [B, W] where W = max_model_len / block_size
(8,192 columns at 131,072 tokens, block 16): every decode step of B sequences packs and copies
B x W x 4 bytes (2 MiB at B = 64) whatever the contexts are, while an eager step stages only the
columns its longest sequence uses. This times `StepInputs.stage()` for decode graph shapes at
B in (1, 8, 64, 256) with each sequence at a 2,048-token context, for W = 128 (what the step
needs), 512, 2,048 and 8,192 (what a 128K graph stages today): host wall time per call (packing and,
on CUDA, issuing the H2D copy) and on CUDA the copy's device time (CUDA events around a
synchronised stage). One JSON line per case on stdout, then a table.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from gpu_stage.step_inputs import StepInputs
from gpu_stage.step_layout import GraphShape
from stages.messages import ScheduledChunk

BLOCK_SIZE = 16
CONTEXT = 2047  # + the new token: 2,048 positions, 128 blocks


def stage_cost(batch: int, width: int, device: str, reps: int) -> dict:
    inputs = StepInputs(8192, batch, width, BLOCK_SIZE, device)
    blocks = (CONTEXT + 1) // BLOCK_SIZE
    chunks = [ScheduledChunk(f"r{i}", [7], CONTEXT, list(range(1 + i * blocks, 1 + (i + 1) * blocks)), True)
              for i in range(batch)]
    shape = GraphShape(batch, batch, inputs.max_blocks_per_seq, True)
    for _ in range(5):
        staged = inputs.stage(chunks, shape=shape, max_seq_len_hint=width * BLOCK_SIZE)
    walls, copies = [], []
    cuda = device == "cuda"
    for _ in range(reps):
        if cuda:
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        t0 = time.perf_counter()
        staged = inputs.stage(chunks, shape=shape, max_seq_len_hint=width * BLOCK_SIZE)
        walls.append((time.perf_counter() - t0) * 1e6)
        if cuda:
            end.record()
            end.synchronize()
            copies.append(start.elapsed_time(end) * 1e3)
    return {"batch": batch, "width": inputs.max_blocks_per_seq, "bytes": staged.layout.size * 4,
            "table_bytes": batch * inputs.max_blocks_per_seq * 4, "stage_wall_us": statistics.median(walls),
            "copy_device_us": statistics.median(copies) if copies else None}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--reps", type=int, default=50)
    a = p.parse_args()
    rows = [stage_cost(b, w, a.device, a.reps) for b in (1, 8, 64, 256) for w in (128, 512, 2048, 8192)]
    for row in rows:
        print(json.dumps(row))
    print(f"{'B':>4} {'W':>5} {'table KiB':>10} {'stage us':>9} {'copy us':>8}")
    for r in rows:
        copy = "" if r["copy_device_us"] is None else f"{r['copy_device_us']:8.1f}"
        print(f"{r['batch']:4d} {r['width']:5d} {r['table_bytes'] / 1024:10.0f} {r['stage_wall_us']:9.1f} {copy:>8}")


if __name__ == "__main__":
    main()
