"""Is a one-sequence CPU decode step faster with every product (layers and lm_head) from the
oneDNN-packed copies than with F.linear's GEMV at one row? (gpu_stage/model/cpu_ops.py keeps F.linear
at 1 row.) Model a is prepared as the runner prepares it; b is the same, its packed copies used from
one row on; each case's reps alternate a, b, a, b (lab/cpu_step_profile.run_case):

    OMP_WAIT_POLICY=PASSIVE GOMP_SPINCOUNT=20000 python -m lab.cpu_one_row_packed [--threads N] [--reps 15]

Prints each case's median ms for a and b and the median of the per-rep ratios b / a.
"""
from __future__ import annotations

import argparse
import json

import torch

from gpu_stage.cpu_malloc import keep_freed_memory
from gpu_stage.kv.cache import KvCache
from gpu_stage.loaders import load_model_source
from gpu_stage.model.cpu_ops import ANY_ROWS, PACKED_LAYER_ROWS
from gpu_stage.runner_builder import load_model
from lab.cpu_step_profile import CASES, run_case


def packed_from_one_row(model) -> int:
    """Every packed copy of `model`'s ops used from one row on (unpadded: no row buckets). -> how many."""
    ops = model.layers[0].ops
    for key, (weight, copy, lo, hi) in list(ops.packed.items()):
        ops.packed[key] = (weight, copy, 1, ANY_ROWS[1] if (lo, hi) != PACKED_LAYER_ROWS else hi)
    return len(ops.packed)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--cases", default="decode1_short,decode1")
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    keep_freed_memory()
    source = load_model_source(None)
    models = {"a": load_model(source, torch.device("cpu"), torch.float32, "torch"),
              "b": load_model(source, torch.device("cpu"), torch.float32, "torch")}
    print("b: packed copies used from one row:", packed_from_one_row(models["b"]))
    kv = KvCache(models["a"].config, 2048, 16, "cpu", torch.float32)
    for name in a.cases.split(","):
        print(name, json.dumps(run_case(models, kv, CASES[name], a.reps, False)), flush=True)


if __name__ == "__main__":
    main()
