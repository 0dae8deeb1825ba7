"""Probe (issue 23): each decode variant's error on the exactness tests' hardest case, on a GPU.

`test_decode_over_8_bit_kv_llama3_shapes_gpu` (tests/gpu_stage/kernels/test_kv8_kernels.py) checks
only the served variant: Llama-3-8B heads, sequences of 2,047 keys whose K/V magnitudes span four
decades, against attention in float64 over the dequantized pool (the norm: < 1e-2). This runs that
case for every variant named, at several seeds, so that a variant is judged before it is served
(s17: the fp8 tensor-core decode missed the norm, 0.0103, only once it was served).

    python3 lab/kv8_exactness_probe.py --variants vt_kmma_n64_w4_s2_r128,vt_kmma_n64_w4_s2_r128_p32 \
        --seeds 64,1,7 --batch 64 [--json OUT]

Prints one line per variant: the error at each seed and the largest.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "gpu_stage" / "kernels")]

import test_kv8_kernels as kv8_tests  # noqa: E402

from gpu_stage.kernels.decode_attention import DecodeWorkspace, decode_attention  # noqa: E402
from gpu_stage.kernels.decode_variants import QUANT_VARIANTS  # noqa: E402

HEADS, KV_HEADS, HEAD_DIM, BLOCK = 32, 8, 128, 16


def variant_errors(name: str, seeds: list[int], batch: int, ctx: int = 2047) -> list[float]:
    cfg = QUANT_VARIANTS[name]
    errors = []
    for seed in seeds:
        layer, q, meta, ref = kv8_tests._case("fp8_e4m3", [(ctx, 1)] * batch, HEADS, KV_HEADS, HEAD_DIM, BLOCK,
                                              torch.bfloat16, seed=seed, v_transposed=cfg.get("V_LAYOUT") == "vt")
        ws = DecodeWorkspace(batch, HEADS, HEAD_DIM, 1, kv8_tests.DEVICE)
        out = decode_attention(q, layer, meta.seq_lens, meta.block_tables, ws, config=dict(cfg))
        errors.append(kv8_tests._rel(out, ref))
    return errors


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variants", required=True, help="comma list of decode_variants.QUANT_VARIANTS names")
    ap.add_argument("--seeds", default="64,1,7")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    results = {}
    for name in args.variants.split(","):
        try:
            errors = variant_errors(name, seeds, args.batch)
        except Exception as exc:  # a variant that does not compile is reported, the rest still run
            print(f"{name}: failed: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
            continue
        results[name] = errors
        print(f"{name}: " + " ".join(f"{e:.4f}" for e in errors) + f"  max {max(errors):.4f}"
              + ("  MISSES the 0.01 norm" if max(errors) >= kv8_tests.TOL[torch.bfloat16] else ""), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"seeds": seeds, "batch": args.batch, "errors": results}, indent=1))


if __name__ == "__main__":
    main()
